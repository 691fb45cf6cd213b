"""The whole pipeline on the in-memory twins: capture -> ListPublisher -> Processor ->
MemoryStore. Same code as production below the Kafka and ClickHouse adapters."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from pathlib import Path

from gpuledger.bus.port import ListPublisher, Published
from gpuledger.producers.capture import IngestSummary, ingest_capture
from gpuledger.sinks.base import MemoryStore
from gpuledger.streams.processor import Processor
from gpuledger.bus.topics import Topics

PARTITIONS = 2
STALE_CEILING_MS = 300_000
GRACE_MS = 120_000
LATENESS_MS = 3_600_000  # the default allowed lateness (GPULEDGER_ALLOWED_LATENESS_S)
WALL_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z: the publisher's clock, after every test plan's evidence


def ingest(capture: Path, prefix: str = "t") -> tuple[Topics, ListPublisher, IngestSummary]:
    topics = Topics(prefix, PARTITIONS)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    summary = ingest_capture(capture, pub, topics, lambda: WALL_MS)
    return topics, pub, summary


def partitioned(topics: Topics, records: Iterable[Published]) -> list[tuple[str, int, int, bytes]]:
    """Give keyed records a partition (by key hash) and per-partition offsets, as a broker would."""
    counts = {t.name: t.partitions for t in topics.all()}
    offsets: dict[tuple[str, int], int] = {}
    out = []
    for r in records:
        p = r.partition if r.partition is not None else zlib.crc32(r.key) % counts[r.topic]
        off = offsets.get((r.topic, p), 0)
        offsets[(r.topic, p)] = off + 1
        out.append((r.topic, p, off, r.value))
    return out


def run_capture(capture: Path, grace_ms: int = GRACE_MS) -> tuple["MemoryPipeline", IngestSummary]:
    """Ingest a capture and process all of it, in ingest order, on the in-memory twins."""
    topics, pub, summary = ingest(capture)
    records = partitioned(topics, pub.records)
    mp = MemoryPipeline(topics, grace_ms=grace_ms)
    mp.extents(records)
    mp.feed(records)
    return mp, summary


class MemoryPipeline:
    def __init__(self, topics: Topics, store: MemoryStore | None = None, grace_ms: int = GRACE_MS,
                 lateness_ms: int = LATENESS_MS) -> None:
        self.topics = topics
        self.store = store or MemoryStore()
        self.dead: list[tuple[str, str]] = []
        self.proc = Processor(topics, self.store, lambda s, r, raw: self.dead.append((s, r)), lambda: None,
                              STALE_CEILING_MS, grace_ms, lateness_ms=lateness_ms)
        self.proc.restore()

    def extents(self, records: list[tuple[str, int, int, bytes]]) -> None:
        ext = {f"{t.name}:{p}": (0, 0) for t in self.topics.processed() for p in range(t.partitions)}
        for topic, p, off, _ in records:
            key = f"{topic}:{p}"
            if key in ext:
                ext[key] = (0, max(ext[key][1], off + 1))
        self.proc.set_extents(ext)

    def feed(self, records: list[tuple[str, int, int, bytes]], batch: int = 500) -> None:
        processed = {t.name for t in self.topics.processed()}
        mine = [r for r in records if r[0] in processed]
        for i in range(0, len(mine), batch):
            for topic, p, off, value in mine[i:i + batch]:
                self.proc.handle(topic, p, off, value)
            self.proc.flush()
        self.proc.flush(closing=True)  # a bounded run: its input ends here


def fleet_batches(plan, every: int, encoded: bool = False) -> list:
    """A generated fleet (bench/fleet_gen.py) through the engine as a worker feeds it (bench/
    hotpath.py ``engine_over``): every record handled, the facts taken every ``every`` records
    and at the end; the batches taken, in order. A dead letter fails the test."""
    import pytest

    from gpuledger.bench.fleet_gen import publish_fleet
    from gpuledger.bench.hotpath import PARTITIONS as FLEET_PARTITIONS
    from gpuledger.bench.hotpath import MemoryPublisher, engine_over

    topics = Topics("fleet", FLEET_PARTITIONS, 30)
    pub = MemoryPublisher()
    publish_fleet(plan, pub, topics, lambda _m: None)
    engine, placed = engine_over(pub, topics, lambda *a: pytest.fail(f"dead letter {a[:2]}"))
    engine.encoded = encoded
    batches = []
    for i, (topic, partition, offset, value) in enumerate(placed, 1):
        if topic in engine.unit_topics:
            engine.handle_unit(topic, partition, offset, value)
        if topic in engine.broadcast_topics:
            engine.handle_broadcast(topic, partition, offset, value, dead_letter=topic not in engine.unit_topics)
        if i % every == 0 or i == len(placed):
            batches.append(engine.advance(closing=i == len(placed)))
    return batches
