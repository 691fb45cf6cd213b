"""gpuledger.bench."""
