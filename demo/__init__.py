"""gpuledger.demo."""
