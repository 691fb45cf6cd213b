"""While the store refuses writes, a flush fails and keeps the facts it drained; the next
flush writes them: an outage loses nothing (the worker retries, tests/faults)."""

import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.sinks.base import MemoryStore, StoreError
from gpuledger.sinks.failpoint import OutageStore
from pipeline import MemoryPipeline, ingest, partitioned, run_capture
from plans import truth_plan


def test_facts_drained_by_a_failed_write_are_written_by_the_next(tmp_path):
    capture = write_capture(truth_plan(), tmp_path / "capture")
    clean, _ = run_capture(capture)
    clock = [0.0]
    memory = MemoryStore()
    store = OutageStore(memory, 1.0, 5.0, lambda: clock[0])  # down from t=1 to t=6
    topics, pub, _ = ingest(capture)
    records = [r for r in partitioned(topics, pub.records) if r[0] in {t.name for t in topics.processed()}]
    mp = MemoryPipeline(topics, store=store)
    mp.extents(records)
    failed = 0
    for i in range(0, len(records), 300):
        clock[0] = i / 1000  # the outage covers a stretch of batches
        for topic, p, off, value in records[i:i + 300]:
            mp.proc.handle(topic, p, off, value)
        try:
            mp.proc.flush()
        except StoreError:
            failed += 1
    clock[0] = 100.0
    mp.proc.flush()
    assert failed > 3 and store.refused == failed
    assert memory.capacity == clean.store.capacity
    assert memory.utilization == clean.store.utilization
    with pytest.raises(StoreError, match="injected outage"):
        OutageStore(MemoryStore(), 0, 1, lambda: 0.5).write_facts(None)
