"""The publishing port: where producers (and the workers, for dead letters) put records.

``KafkaPublisher`` is the real adapter (idempotent confluent-kafka producer);
``ListPublisher`` is its in-memory twin for pure tests. Both honour the same contract
(tests/integration/test_port_contracts.py runs against each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["MAX_RECORD_BYTES", "Published", "Publisher", "ListPublisher"]

# The largest record (key + value, bytes) a publisher takes. A Kafka broker left at its
# defaults refuses a record batch over message.max.bytes = 1,048,588 bytes; 1,000,000 leaves
# room for the batch and record headers, so a record that passes this check fits on any
# broker (the local stack allows 8 MiB). Larger lines are dead letters, never produced.
MAX_RECORD_BYTES = 1_000_000


@dataclass(frozen=True)
class Published:
    topic: str
    key: bytes
    value: bytes
    timestamp_ms: int
    partition: int | None


class Publisher(Protocol):
    max_record_bytes: int  # records (key + value) above this are refused before producing

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
    max_record_bytes: int = MAX_RECORD_BYTES

    def publish(self, topic: str, key: bytes, value: bytes, timestamp_ms: int, partition: int | None = None) -> None:
        if partition is not None and not 0 <= partition < self.partitions(topic):
            raise ValueError(f"partition {partition} out of range for {topic}")
        if len(key) + len(value) > self.max_record_bytes:
            raise ValueError(f"a record of {len(key) + len(value)} bytes is over the limit of {self.max_record_bytes}")
        self.records.append(Published(topic, key, value, timestamp_ms, partition))

    def partitions(self, topic: str) -> int:
        return self.partition_counts.get(topic, 1)

    def flush(self) -> None:
        self.flushed = len(self.records)
