"""Topic names, roles, keys and retention, set when a topic is created.

- Source topics are the system of record: keyed by the durable id the join needs, Kafka
  timestamp = ``observed_at``, kept for the audit horizon (``audit_retention_days``,
  default 400: a closed year plus a dispute window). Replay reads them from the start of
  retention, which is also the look-back for who owned what when a period began.
- The reference topic is a system of record too: every document (inventory, quotas, rate
  cards, credits, endpoints) is kept, in order, forever (delete policy, no retention limit;
  never compacted to the latest per key). A replay of a closed period reads it up to where
  that period closed, so documents published later do not change what it reproduces.
- Fact topics carry the workers' facts to the sink (kept a week: the sink's lag allowance;
  capacity, utilization and health facts many to a record, a batch keyed by its first fact's
  id, streams/fact_batches.py; the other kinds one to a record, keyed by fact id; ClickHouse holds them after, and they can always be rebuilt from
  the source topics with ``gpuledger replay``). ``facts.progress`` (compacted) says how far
  each unit and the broadcast have read: the ledger's sources.
- State topics are the workers' changelogs (compacted): a unit's snapshot is on the unit's
  partition, keyed by unit; the broadcast snapshot on its own topic.
- The dead-letter topic keeps what could not be taken for the audit horizon too.
- The clock topic stamps ``LogAppendTime``: producers measure their host clock against it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, NewTopic

from gpuledger.bus.offsets import read_extents

__all__ = ["TopicSpec", "Topics", "ensure_topics", "read_extents", "topics_for"]

AUDIT_RETENTION_DAYS = 400  # 13 months: a closed year plus a dispute window
FACT_SCHEMAS = {"capacity": "capacity_fact", "utilization": "utilization_fact", "requests": "request_fact",
                "demand": "demand_fact", "models": "model_fact",
                "health": "gpu_health_fact", "health_incidents": "gpu_health_incident"}
STATE_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TopicSpec:
    name: str
    schema: str
    partitions: int
    config: dict


class Topics:
    """Every topic of one gpuledger deployment (names share the prefix)."""

    def __init__(self, prefix: str, source_partitions: int, retention_days: int = AUDIT_RETENTION_DAYS) -> None:
        audit_ms = str(retention_days * 24 * 3600 * 1000)
        src = {"cleanup.policy": "delete", "retention.ms": audit_ms, "compression.type": "lz4",
               "message.timestamp.type": "CreateTime"}
        ref = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1", "compression.type": "lz4"}
        p = source_partitions
        self.prefix = prefix
        self.k8s = TopicSpec(f"{prefix}.source.k8s-watch", "k8s_watch_event", p, src)
        self.podresources = TopicSpec(f"{prefix}.source.podresources", "podresources_snapshot", p, src)
        self.dcgm = TopicSpec(f"{prefix}.source.dcgm", "dcgm_scrape", p, src)
        self.vgpu = TopicSpec(f"{prefix}.source.vgpu", "vgpu_snapshot", p, src)
        self.requests = TopicSpec(f"{prefix}.source.requests", "request_event", p, src)
        self.model_metrics = TopicSpec(f"{prefix}.source.model-metrics", "model_scrape", p, src)  # by endpoint
        self.reference = TopicSpec(f"{prefix}.reference.documents", "reference_document", 1, ref)
        self.dead_letter = TopicSpec(f"{prefix}.dead-letter", "dead_letter", 1,
                                     {"cleanup.policy": "delete", "retention.ms": audit_ms})
        week = {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000), "compression.type": "lz4",
                "max.message.bytes": str(16 * 1024 * 1024)}
        self.facts = {kind: TopicSpec(f"{prefix}.facts.{kind}", schema, p, week) for kind, schema in FACT_SCHEMAS.items()}
        compacted = {"cleanup.policy": "compact", "compression.type": "lz4", "segment.ms": "60000",
                     "min.cleanable.dirty.ratio": "0.1", "delete.retention.ms": "60000",
                     "max.message.bytes": str(STATE_MAX_BYTES)}
        self.progress = TopicSpec(f"{prefix}.facts.progress", "", 1, compacted)
        self.unit_state = TopicSpec(f"{prefix}.state.units", "", p, compacted)
        self.broadcast_state = TopicSpec(f"{prefix}.state.broadcast", "", 1, compacted)
        # producers' probes of the broker clock: the broker stamps them, a day is plenty
        self.clock = TopicSpec(f"{prefix}.clock", "clock_heartbeat", 1,
                               {"cleanup.policy": "delete", "retention.ms": str(24 * 3600 * 1000),
                                "message.timestamp.type": "LogAppendTime"})

    def all(self) -> list[TopicSpec]:
        return [self.k8s, self.podresources, self.dcgm, self.vgpu, self.requests, self.model_metrics, self.reference,
                self.dead_letter, self.clock, *self.facts.values(), self.progress, self.unit_state, self.broadcast_state]

    def fact_topics(self) -> list[TopicSpec]:
        return [*self.facts.values(), self.progress]

    def job(self, name: str) -> Topics:
        """The same source topics with a job's own fact and state topics (a replay's)."""
        other = object.__new__(Topics)
        other.__dict__.update(self.__dict__)
        mine = Topics(f"{self.prefix}.job.{name}", self.podresources.partitions)
        other.facts, other.progress = mine.facts, mine.progress
        other.unit_state, other.broadcast_state = mine.unit_state, mine.broadcast_state
        return other

    def processed(self) -> list[TopicSpec]:
        """The topics `process` reads."""
        return [self.reference, self.k8s, self.podresources, self.dcgm, self.vgpu, self.requests, self.model_metrics]


def ensure_topics(bootstrap: str, topics: Topics, timeout_s: float = 30.0,
                  client: Mapping[str, str] | None = None) -> list[str]:
    """Create missing topics; returns the names created. Idempotent."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    new = [NewTopic(t.name, num_partitions=t.partitions, replication_factor=1, config=t.config)
           for t in topics.all() if t.name not in existing]
    if not new:
        return []
    for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except Exception as exc:  # noqa: BLE001
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    _wait_for_leaders(admin, [t.topic for t in new], timeout_s)
    return [t.topic for t in new]


def _wait_for_leaders(admin: AdminClient, names: list[str], timeout_s: float) -> None:
    """Return once every partition of the new topics has a leader: nothing is published to
    a partition that is still being set up."""
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=timeout_s).topics
        waiting = [n for n in names if n not in md or md[n].error is not None or not md[n].partitions
                   or any(p.leader < 0 for p in md[n].partitions.values())]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics without a partition leader after {timeout_s:.0f}s: {', '.join(waiting)}")
        time.sleep(0.2)


def topics_for(settings) -> Topics:
    """The deployment's topics as its settings name them."""
    return Topics(settings.topic_prefix, settings.source_partitions, settings.audit_retention_days)
