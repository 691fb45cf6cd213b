"""The publishing port: where producers put source records.

``KafkaPublisher`` is the real adapter (idempotent confluent-kafka producer);
``ListPublisher`` is its in-memory twin for pure tests. Both honour the same contract
(tests/unit/producers/test_publisher_contract.py runs against each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Published", "Publisher", "ListPublisher"]


@dataclass(frozen=True)
class Published:
    topic: str
    key: bytes
    value: bytes
    timestamp_ms: int
    partition: int | None


class Publisher(Protocol):
    def publish(self, topic: str, key: bytes, value: bytes, timestamp_ms: int, partition: int | None = None) -> None:
        """Queue one record; the Kafka timestamp is the record's event time."""

    def partitions(self, topic: str) -> int:
        """How many partitions the topic has."""

    def flush(self) -> None:
        """Block until every queued record is acknowledged; raise if any failed."""


@dataclass
class ListPublisher:
    """Keeps published records in a list, in order."""

    partition_counts: dict[str, int] = field(default_factory=dict)
    records: list[Published] = field(default_factory=list)
    flushed: int = 0

    def publish(self, topic: str, key: bytes, value: bytes, timestamp_ms: int, partition: int | None = None) -> None:
        if partition is not None and not 0 <= partition < self.partitions(topic):
            raise ValueError(f"partition {partition} out of range for {topic}")
        self.records.append(Published(topic, key, value, timestamp_ms, partition))

    def partitions(self, topic: str) -> int:
        return self.partition_counts.get(topic, 1)

    def flush(self) -> None:
        self.flushed = len(self.records)
