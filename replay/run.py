"""``gpuledger replay``: rebuild a period from the source topics into a shadow database.

The topics are the system of record and are kept for the audit horizon, so the look-back
that tells who owned what when the period began is simply the start of retention: the
replay reads every processed topic from its first offset, through the same ``Processor``
as ``gpuledger process``, into the database NAME of the same engine, then builds the
period's ledger document there (stored in NAME's ``ledger_documents``). ``--at-close``
stops every partition where the closed ledger's sources stopped, so the document must come
out byte-for-byte the same (same hash); without it the replay reads everything there is
now, and ``gpuledger diff`` shows what later evidence changed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from gpuledger.config import Settings
from gpuledger.ledger.close import build_document
from gpuledger.domain.ledger import content_hash
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.ledger_store import ClickHouseLedger
from gpuledger.streams.processor import PROCESSOR_NAME, Processor
from gpuledger.streams.topics import Topics, read_extents, topics_for

__all__ = ["ReplayError", "ReplayResult", "check_shadow_name", "replay_period"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class ReplayError(ValueError):
    """The replay cannot start as asked (bad name, nothing closed to stop at)."""


@dataclass(frozen=True)
class ReplayResult:
    document: dict
    records: int
    dead_lettered: int
    seconds: float


def check_shadow_name(name: str) -> None:
    """A replay's shadow database: a plain database name, never the live one or a system one."""
    if not _NAME.match(name) or name == "gpuledger" or name.lower().startswith("system"):
        raise ReplayError(f"{name!r}: a database name ([A-Za-z_][A-Za-z0-9_]*), not the live one")


def _stops(settings: Settings, topics: Topics, closed: dict | None, at_close: bool) -> dict[str, tuple[int, int]]:
    extents = read_extents(settings.kafka_bootstrap, [t.name for t in topics.processed()])
    if not at_close:
        return extents
    if closed is None:
        raise ReplayError("--at-close needs a closed period: close it first, or replay without --at-close")
    stop = {f"{s['topic']}:{s['partition']}": s["last_offset"] + 1 for s in closed["sources"]}
    return {key: (low, min(high, stop.get(key, low))) for key, (low, high) in extents.items()}


def replay_period(settings: Settings, main: ClickHouseStore, period: str, into: str, at_close: bool,
                  progress: Callable[[str], None], monotonic: Callable[[], float] = time.monotonic) -> ReplayResult:
    """``main``: the live database, whose ledger the replay is checked against."""
    check_shadow_name(into)
    topics = topics_for(settings)
    closed_docs = ClickHouseLedger(main).closed()
    closed = next((d for d in closed_docs if d["period"] == period), None)
    extents = _stops(settings, topics, closed, at_close)
    shadow = main.sibling(into)
    shadow.drop_database()
    shadow.ensure_schema()
    dead = {"n": 0}
    proc = Processor(topics, shadow, lambda *_: dead.__setitem__("n", dead["n"] + 1), lambda: None,
                     int(settings.stale_ceiling_s * 1000), int(settings.podresources_grace_s * 1000),
                     max_future_skew_ms=int(settings.max_future_skew_s * 1000))
    proc.set_extents(extents)
    total = sum(high - low for low, high in extents.values())
    started = monotonic()
    done = _consume(settings, proc, extents, total, progress, monotonic, started)
    proc.flush()
    progress(f"replay {period}: {done} records read into {into}; building the ledger document")
    doc, _ = build_document(shadow, closed_docs, shadow.load_checkpoint(PROCESSOR_NAME), period, progress)
    doc["status"] = "replayed"
    doc["hash"] = content_hash(doc)
    ClickHouseLedger(shadow).append(period, doc["hash"], 0, doc)
    return ReplayResult(doc, done, dead["n"], monotonic() - started)


def _consume(settings: Settings, proc: Processor, extents: dict[str, tuple[int, int]], total: int,
             progress: Callable[[str], None], monotonic: Callable[[], float], started: float) -> int:
    todo = {k: v for k, v in extents.items() if v[1] > v[0]}
    if not todo:
        return 0
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "gpuledger-replay",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1]), low)
                     for k, (low, _) in todo.items()])
    done, since_flush, last_report = 0, 0, 0.0
    try:
        while todo:
            for msg in consumer.consume(num_messages=settings.batch_max_records, timeout=1.0):
                if msg.error():
                    continue
                key = f"{msg.topic()}:{msg.partition()}"
                stop = todo.get(key)
                if stop is None or msg.offset() >= stop[1]:
                    continue
                proc.handle(msg.topic(), msg.partition(), msg.offset(), msg.value())
                done, since_flush = done + 1, since_flush + 1
                if msg.offset() + 1 >= stop[1]:
                    del todo[key]
                    consumer.incremental_unassign([TopicPartition(msg.topic(), msg.partition())])
            if since_flush >= settings.batch_max_records:
                proc.flush(checkpoint=False)
                since_flush = 0
            now = monotonic()
            if now - last_report >= 2.0 or not todo:
                last_report = now
                rate = done / max(now - started, 1e-9)
                eta = (total - done) / rate if rate else float("inf")
                progress(f"replay: {done}/{total} records ({100 * done / max(total, 1):.0f}%), "
                         f"{rate:,.0f} records/s, ETA {eta:,.0f} s")
    finally:
        consumer.close()
    return done
