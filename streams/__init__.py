"""gpuledger.streams."""
