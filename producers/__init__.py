"""gpuledger.producers."""
