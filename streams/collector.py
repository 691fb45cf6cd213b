"""Python's cycle collector, set for the data path (workers and sinks).

A worker or a sink allocates a container object for nearly every record, sample and fact (a
Kafka message, a sample, a fact, the tuples and dicts around them) and frees almost all of them
by reference counting; they form no cycles. With the interpreter's default threshold (a young
collection every 700 net allocations) a batch of 50,000 messages runs ~70 collections, each one
walking the objects still young. Measured on 256 GPUs x 4 h (BENCHMARKS.md): about 6 % of a
worker's CPU and 10 % of a sink's. A young collection every 50,000 allocations keeps the same
peak memory (what a collection could free between two is at most those 50,000 objects' worth)
and leaves cycles collected as before, only later.
"""

from __future__ import annotations

import gc

__all__ = ["DATA_PATH_THRESHOLDS", "collect_for_the_data_path"]

DATA_PATH_THRESHOLDS = (50_000, 20, 100)  # young allocations; young collections per middle; middle per old


def collect_for_the_data_path() -> None:
    """Set the collector's thresholds for a process that moves records (idempotent)."""
    gc.set_threshold(*DATA_PATH_THRESHOLDS)
