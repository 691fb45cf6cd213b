"""gpuledger.ledger."""
