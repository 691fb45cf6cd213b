"""gpuledger.replay."""
