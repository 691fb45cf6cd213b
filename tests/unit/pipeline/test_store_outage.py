"""While the store refuses writes for a while (transient), a flush fails and keeps the facts it
drained; the next flush writes them: an outage loses nothing (the worker retries, tests/faults).
A store that refuses some rows for good gets the rest, and those rows are dead-lettered; one
that refuses whatever the rows (its table is gone) fails the flush, keeping every fact."""

import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.domain.facts import FactBatch
from gpuledger.sinks.base import MemoryStore, PermanentStoreError, StoreError
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
    with pytest.raises(StoreError, match="injected outage") as info:
        OutageStore(MemoryStore(), 0, 1, lambda: 0.5).write_facts(None)
    assert info.value.transient


def test_an_outage_armed_by_writes_begins_after_them_whenever_they_come():
    """[0, 10, 2]: the first two fact writes go through, the third (whenever it comes) opens a
    10-s outage; a run that writes everything in its first seconds still meets it mid-run."""
    clock = [0.0]
    memory = MemoryStore()
    store = OutageStore(memory, 0.0, 10.0, lambda: clock[0], after_writes=2)
    batch = FactBatch()
    store.write_facts(batch)
    clock[0] = 50.0  # long after start: time alone does not open it
    store.write_facts(batch)
    assert store.refused == 0
    for at in (50.0, 55.0, 59.9):
        clock[0] = at
        with pytest.raises(StoreError, match="injected outage of 10s"):
            store.write_facts(batch)
    clock[0] = 60.0
    store.write_facts(batch)
    assert store.refused == 3


def test_the_outage_setting_takes_two_or_three_numbers(monkeypatch):
    from gpuledger.config.settings import Settings
    for text, want in (("[5, 60]", (5.0, 60.0)), ("[0, 60, 1]", (0.0, 60.0, 1))):
        monkeypatch.setenv("GPULEDGER_FAILPOINT_STORE_OUTAGE", text)
        assert Settings().failpoint_store_outage == want


class RefusingStore(MemoryStore):
    """Refuses for good any batch holding a utilization fact of ``bad_gpu``; or, with
    ``table_gone``, every write to utilization_facts (and its probe)."""

    def __init__(self, bad_gpu: str = "", table_gone: bool = False) -> None:
        super().__init__()
        self.bad_gpu, self.table_gone = bad_gpu, table_gone

    def write_facts(self, batch: FactBatch) -> None:
        if batch.utilization and (self.table_gone or any(f.gpu_uuid == self.bad_gpu for f in batch.utilization)):
            raise PermanentStoreError("insert into gpuledger.utilization_facts failed: a value does not fit",
                                      "utilization_facts")
        super().write_facts(batch)

    def probe(self, table: str) -> None:
        if self.table_gone and table == "utilization_facts":
            raise PermanentStoreError("Table gpuledger.utilization_facts does not exist (UNKNOWN_TABLE)", table)


def test_rows_refused_for_good_are_dead_lettered_and_the_rest_written(tmp_path):
    capture = write_capture(truth_plan(), tmp_path / "capture")
    clean, _ = run_capture(capture)
    bad_gpu = sorted({f.gpu_uuid for f in clean.store.utilization.values()})[0]
    topics, pub, _ = ingest(capture)
    records = partitioned(topics, pub.records)
    mp = MemoryPipeline(topics, store=RefusingStore(bad_gpu))
    mp.extents(records)
    mp.feed(records)
    refused = {k for k, f in clean.store.utilization.items() if f.gpu_uuid == bad_gpu}
    assert refused and mp.store.utilization == {k: f for k, f in clean.store.utilization.items() if k not in refused}
    assert mp.store.capacity == clean.store.capacity
    assert len(mp.dead) == len(refused) and all(r.startswith("StoreRejected: utilization_facts row ") for _, r in mp.dead)
    assert {s for s, _ in mp.dead} == {f"{f.src_topic}/{f.src_partition}@{f.src_offset}"
                                       for k, f in clean.store.utilization.items() if k in refused}


def test_a_table_refused_whatever_the_rows_fails_the_flush_and_keeps_the_facts(tmp_path):
    capture = write_capture(truth_plan(hours=1), tmp_path / "capture")
    clean, _ = run_capture(capture)
    topics, pub, _ = ingest(capture)
    records = [r for r in partitioned(topics, pub.records) if r[0] in {t.name for t in topics.processed()}]
    store = RefusingStore(table_gone=True)
    mp = MemoryPipeline(topics, store=store)
    mp.extents(records)
    for topic, p, off, value in records:
        mp.proc.handle(topic, p, off, value)
    with pytest.raises(PermanentStoreError, match="utilization_facts does not exist"):
        mp.proc.flush()
    assert mp.dead == [] and store.checkpoints == {}  # no row blamed, nothing acknowledged
    store.table_gone = False  # the table is back
    mp.proc.flush()
    assert store.utilization == clean.store.utilization
