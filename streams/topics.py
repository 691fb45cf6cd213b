"""Topic names, roles, keys and retention, set when a topic is created.

- Source topics are the system of record: keyed by the durable id the join needs, Kafka
  timestamp = ``observed_at``, kept for the audit horizon (``audit_retention_days``,
  default 400: a closed year plus a dispute window). Replay reads them from the start of
  retention, which is also the look-back for who owned what when a period began.
- The reference topic is state: compacted, the latest document per key (cluster/kind) is
  kept forever.
- Facts are not kept in Kafka at all: ClickHouse holds them, and they can always be
  rebuilt from the source topics (``gpuledger replay``).
- The dead-letter topic keeps what could not be taken for the audit horizon too.
- The clock topic stamps ``LogAppendTime``: producers measure their host clock against it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["TopicSpec", "Topics", "ensure_topics", "read_extents", "topics_for"]

AUDIT_RETENTION_DAYS = 400  # 13 months: a closed year plus a dispute window


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
        ref = {"cleanup.policy": "compact", "compression.type": "lz4"}
        p = source_partitions
        self.k8s = TopicSpec(f"{prefix}.source.k8s-watch", "k8s_watch_event", p, src)
        self.podresources = TopicSpec(f"{prefix}.source.podresources", "podresources_snapshot", p, src)
        self.dcgm = TopicSpec(f"{prefix}.source.dcgm", "dcgm_scrape", p, src)
        self.vgpu = TopicSpec(f"{prefix}.source.vgpu", "vgpu_snapshot", p, src)
        self.requests = TopicSpec(f"{prefix}.source.requests", "request_event", p, src)
        self.reference = TopicSpec(f"{prefix}.reference.documents", "reference_document", 1, ref)
        self.dead_letter = TopicSpec(f"{prefix}.dead-letter", "dead_letter", 1,
                                     {"cleanup.policy": "delete", "retention.ms": audit_ms})
        # producers' probes of the broker clock: the broker stamps them, a day is plenty
        self.clock = TopicSpec(f"{prefix}.clock", "clock_heartbeat", 1,
                               {"cleanup.policy": "delete", "retention.ms": str(24 * 3600 * 1000),
                                "message.timestamp.type": "LogAppendTime"})

    def all(self) -> list[TopicSpec]:
        return [self.k8s, self.podresources, self.dcgm, self.vgpu, self.requests, self.reference, self.dead_letter,
                self.clock]

    def processed(self) -> list[TopicSpec]:
        """The topics `process` reads."""
        return [self.reference, self.k8s, self.podresources, self.dcgm, self.vgpu, self.requests]


def ensure_topics(bootstrap: str, topics: Topics, timeout_s: float = 30.0) -> list[str]:
    """Create missing topics; returns the names created. Idempotent."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
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


def read_extents(bootstrap: str, topic_names: list[str], retry_s: float = 30.0) -> dict[str, tuple[int, int]]:
    """Low and high offsets of every partition of the topics ("topic:partition" -> (low, high));
    retried for a while when a partition has no leader for a moment."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gpuledger-extents", "enable.auto.commit": False,
                         "log_level": 3})
    deadline = time.monotonic() + retry_s
    try:
        md = consumer.list_topics(timeout=10)
        while True:
            try:
                return {f"{name}:{p}": consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
                        for name in topic_names for p in sorted(md.topics[name].partitions)}
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
