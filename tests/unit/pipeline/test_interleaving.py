"""Determinism: the same topics give the same facts whatever order the partitions are read
in (each partition in its own order, as Kafka delivers it) and however the input is cut
into batches."""

import random
from dataclasses import replace

from gpuledger.demo.cluster import write_capture
from gpuledger.demo.varied import varied_plan, write_varied
from pipeline import MemoryPipeline, ingest, partitioned
from plans import sharing_plan, truth_plan


def _facts(store) -> dict:
    strip = lambda f: replace(f, src_offset=0) if hasattr(f, "src_offset") else f  # noqa: E731
    return {t: {k: strip(f) for k, f in getattr(store, t).items()} for t in ("capacity", "utilization", "requests")}


def _interleave(records, rng: random.Random):
    """A random merge of the partitions, each kept in offset order."""
    queues: dict = {}
    for r in records:
        queues.setdefault((r[0], r[1]), []).append(r)
    out = []
    while queues:
        key = rng.choice(sorted(queues))
        out.append(queues[key].pop(0))
        if not queues[key]:
            del queues[key]
    return out


def test_any_interleaving_and_batching_gives_the_same_facts(tmp_path):
    varied = varied_plan(30, 20, jitter=0.2, missing=0.01, hours=2, seed=5)  # split samples, lost ones
    for name, capture in (("truth", lambda: write_capture(truth_plan(), tmp_path / "truth")),
                          ("sharing", lambda: write_capture(sharing_plan(), tmp_path / "sharing")),
                          ("varied", lambda: write_varied(varied, tmp_path / "varied"))):
        topics, pub, _ = ingest(capture())
        records = partitioned(topics, pub.records)
        runs = []
        for seed, batch in ((1, 500), (2, 37), (3, 4000)):
            mp = MemoryPipeline(topics)
            mp.extents(records)
            mp.feed(_interleave(records, random.Random(seed)), batch=batch)
            runs.append(_facts(mp.store))
        assert runs[0]["capacity"] and runs[0]["utilization"], name
        assert runs[0] == runs[1] == runs[2], name
