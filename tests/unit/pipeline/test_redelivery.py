"""At-least-once upstream: a capture published twice (an ingest killed and run again) gives
the same facts as once — repeated snapshots are stale, repeated scrapes are dropped, watch
events fold idempotently, requests and reference documents keep their ids."""

from dataclasses import replace

from gpuledger.demo.cluster import write_capture
from pipeline import MemoryPipeline, ingest, partitioned, run_capture
from plans import sharing_plan, truth_plan


def _twice(capture, cut: int):
    topics, pub, _ = ingest(capture)
    first = pub.records[:cut]  # what a killed ingest got out
    records = partitioned(topics, first + pub.records)
    mp = MemoryPipeline(topics)
    mp.extents(records)
    mp.feed(records)
    return mp


def test_a_capture_published_twice_gives_the_facts_of_once(tmp_path):
    for name, plan in (("truth", truth_plan()), ("sharing", sharing_plan())):
        capture = write_capture(plan, tmp_path / name)
        once, _ = run_capture(capture)
        for cut in (0, 700, 4000):
            twice = _twice(capture, cut)
            for table in ("capacity", "utilization", "requests", "demand"):  # where evidence sits differs
                assert _facts(getattr(twice.store, table)) == _facts(getattr(once.store, table)), (name, cut, table)
        assert twice.proc.attributors["prod-ai-1"].counters.repeated_scrapes > 0


def _facts(table: dict) -> dict:
    return {k: replace(f, src_topic="", src_partition=0, src_offset=0) if hasattr(f, "src_offset") else f
            for k, f in table.items()}
