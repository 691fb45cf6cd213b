"""Topic names, roles, keys and retention.

Source topics are the system of record: keyed by the durable id the join needs, Kafka
timestamp = ``observed_at``, kept for the audit horizon. Reference topics are compacted
(the latest document per key wins). The dead-letter topic keeps what could not be taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["TopicSpec", "Topics", "ensure_topics"]

AUDIT_RETENTION_MS = str(400 * 24 * 3600 * 1000)  # 13 months: a closed year plus a dispute window


@dataclass(frozen=True)
class TopicSpec:
    name: str
    schema: str
    partitions: int
    config: dict


class Topics:
    """Every topic of one gpuledger deployment (names share the prefix)."""

    def __init__(self, prefix: str, source_partitions: int) -> None:
        src = {"cleanup.policy": "delete", "retention.ms": AUDIT_RETENTION_MS, "compression.type": "lz4",
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
                                     {"cleanup.policy": "delete", "retention.ms": AUDIT_RETENTION_MS})

    def all(self) -> list[TopicSpec]:
        return [self.k8s, self.podresources, self.dcgm, self.vgpu, self.requests, self.reference, self.dead_letter]

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
    return [t.topic for t in new]
