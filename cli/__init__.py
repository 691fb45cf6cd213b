"""gpuledger.cli."""
