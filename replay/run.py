"""``gpuledger replay``: rebuild a period from the source topics into a shadow database.

The topics are the system of record and are kept for the audit horizon, so the look-back
that tells who owned what when the period began is simply the start of retention: the
replay runs K attribution workers (``--processes``, the same ``gpuledger worker`` as live
processing, each taking a disjoint set of units) over every processed topic from its first
offset, as a job of its own (its own consumer group, fact and state topics, deleted after),
and the same sink writes their facts into the database NAME of the same engine; then it
builds the period's ledger document there (stored in NAME's ``ledger_documents``). The facts
of a unit do not depend on which worker holds it, so the document is the same for any K.
``--at-close`` stops every partition where the closed ledger's sources stopped, so the
document must come out byte-for-byte the same (same hash); without it the replay reads
everything there is now, and ``gpuledger diff`` shows what later evidence changed.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from confluent_kafka.admin import AdminClient

from gpuledger.config import Settings
from gpuledger.domain.ledger import billing_policy, content_hash
from gpuledger.domain.suspense import billing_classes
from gpuledger.ledger.close import build_document
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.health_sql import health_ddl_statements
from gpuledger.sinks.ledger_store import ClickHouseLedger
from gpuledger.sinks.progress import job_checkpoint
from gpuledger.sinks.schema_sql import ddl_statements
from gpuledger.streams.supervisor import run_sink, spawn_workers
from gpuledger.bus.security import client_config
from gpuledger.bus.topics import Topics, ensure_topics, read_extents, topics_for

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


_RESERVED = ("gpuledger", "default", "information_schema")


def check_shadow_name(name: str) -> None:
    """A replay's shadow database: a plain database name, never the live one, ClickHouse's
    ``default`` or a system one (the shadow is dropped and rebuilt)."""
    if not _NAME.match(name) or name.lower() in _RESERVED or name.lower().startswith("system"):
        raise ReplayError(f"{name!r}: give a database name ([A-Za-z_][A-Za-z0-9_]*) of its own for the replay, "
                          f"not the live one, {', '.join(_RESERVED[1:])} or system*")


def check_shadow_droppable(shadow: ClickHouseStore) -> None:
    """Refuse to drop a database that holds anything a replay did not put there."""
    ddl = ddl_statements(shadow.db) + health_ddl_statements(shadow.db)  # what ensure_schema creates
    ours = {stmt.split(f"{shadow.db}.", 1)[1].split()[0] for stmt in ddl if f"{shadow.db}." in stmt}
    _, rows = shadow.query("SELECT name FROM system.tables WHERE database = %(d)s", {"d": shadow.db})
    foreign = sorted({r[0] for r in rows} - ours)
    if foreign:
        raise ReplayError(f"database {shadow.db!r} holds tables a replay did not create ({', '.join(foreign[:5])}): "
                          "it is not dropped; replay into another name")


def _stops(settings: Settings, topics: Topics, closed: dict | None, at_close: bool) -> dict[str, tuple[int, int]]:
    extents = read_extents(settings.kafka_bootstrap, [t.name for t in topics.processed()],
                           client=client_config(settings))
    if not at_close:
        return extents
    if closed is None:
        raise ReplayError("--at-close needs a closed period: close it first, or replay without --at-close")
    stop = {f"{s['topic']}:{s['partition']}": s["last_offset"] + 1 for s in closed["sources"]}
    return {key: (low, min(high, stop.get(key, low))) for key, (low, high) in extents.items()}


def replay_period(settings: Settings, main: ClickHouseStore, period: str, into: str, at_close: bool,
                  progress: Callable[[str], None], monotonic: Callable[[], float] = time.monotonic,
                  processes: int = 1, wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> ReplayResult:
    """``main``: the live database, whose ledger the replay is checked against."""
    check_shadow_name(into)
    topics = topics_for(settings)
    closed_docs = ClickHouseLedger(main).closed()
    closed = next((d for d in closed_docs if d["period"] == period), None)
    extents = _stops(settings, topics, closed, at_close)
    shadow = main.sibling(into)
    check_shadow_droppable(shadow)
    shadow.drop_database()
    shadow.ensure_schema()
    job = f"replay-{into}-{uuid.uuid4().hex[:8]}"
    job_topics = topics.job(job)
    ensure_topics(settings.kafka_bootstrap, job_topics, client=client_config(settings))
    stops = settings.home / f"{job}.stops.json"
    stops.parent.mkdir(parents=True, exist_ok=True)
    stops.write_bytes(orjson.dumps({k: high for k, (_, high) in extents.items()}))
    total = sum(high - low for low, high in extents.values())
    progress(f"replay {period}: {total} records with {processes} worker(s) into {into}")
    started = monotonic()
    try:
        procs = spawn_workers(settings, processes, ["--until-caught-up", "--job", job, "--stop-offsets", str(stops)],
                              progress)
        references = {k: high for k, (_, high) in extents.items() if k.rsplit(":", 1)[0] == topics.reference.name}
        code = run_sink(settings, job_topics, shadow, f"{settings.topic_prefix}-job-{job}-sink", progress, wall_ms,
                        lambda: False, threading.Lock(), procs, True, reference_stops=references)
        if code != 0:
            raise RuntimeError(f"replay {period}: the replay workers failed (exit {code}); see their messages above")
    finally:
        _delete_job(settings, job_topics, job)
        stops.unlink(missing_ok=True)
    cp = job_checkpoint(shadow)
    progress(f"replay {period}: read into {into} in {monotonic() - started:.1f}s; building the ledger document")
    # a closed period is priced again under the billing policy it was closed with
    bill = (billing_policy(closed) if closed is not None
            else billing_classes(settings.close_bill_confidence.split(","), settings.close_telemetry_unknown,
                                  settings.close_unattributed))
    doc, _ = build_document(shadow, closed_docs, cp, period, progress, bill)
    doc["status"] = "replayed"
    doc["hash"] = content_hash(doc)
    ClickHouseLedger(shadow).append(period, doc["hash"], 0, doc)
    return ReplayResult(doc, total, int(cp.state.get("dead_lettered", 0)) if cp else 0, monotonic() - started)


def _delete_job(settings: Settings, topics: Topics, job: str) -> None:
    """A replay's own topics and groups go when it is done: the shadow database holds the result."""
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap, **client_config(settings)})
    names = [t.name for t in (*topics.fact_topics(), topics.unit_state, topics.broadcast_state)]
    for fut in admin.delete_topics(names, operation_timeout=30).values():
        try:
            fut.result()
        except Exception:  # noqa: BLE001 — already gone
            pass
    groups = [f"{settings.topic_prefix}-job-{job}", f"{settings.topic_prefix}-job-{job}-sink"]
    for fut in admin.delete_consumer_groups(groups, request_timeout=30).values():
        try:
            fut.result()
        except Exception:  # noqa: BLE001 — already gone, or never joined
            pass
