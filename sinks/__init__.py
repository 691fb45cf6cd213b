"""gpuledger.sinks."""
