"""The Kafka adapter of the publishing port: an idempotent confluent-kafka producer."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import KafkaException, Producer

from gpuledger.bus.port import MAX_RECORD_BYTES
from gpuledger.bus.topics import read_extents

__all__ = ["KafkaPublisher", "PublishError"]


class PublishError(RuntimeError):
    """The broker refused or lost records; the message says which topic and why."""


class KafkaPublisher:
    """Idempotent (no duplicates on retry), acks=all, murmur2 partitioning like Java clients,
    so records keyed by node land in the same partition number on every source topic.

    ``flush`` also checks that the broker holds what it acknowledged: each partition's end
    offset must have grown by at least the records delivered there since the publisher first
    wrote to the topic. A shortfall is an error naming the partition (publishing again is
    harmless: the processor takes repeated records once)."""

    max_record_bytes = MAX_RECORD_BYTES  # checked by the callers before they publish

    def __init__(self, bootstrap: str, verify: bool = True, client: Mapping[str, str] | None = None) -> None:
        self._bootstrap, self._verify, self._client = bootstrap, verify, dict(client or {})
        self._ends_before: dict[str, dict[int, int]] = {}  # topic -> partition -> end offset at first use
        self._delivered: dict[tuple[str, int], int] = {}
        self._producer = Producer({
            "bootstrap.servers": bootstrap,
            **self._client,
            "enable.idempotence": True,
            "log_level": 3,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "partitioner": "murmur2_random",
            "message.max.bytes": 8_000_000,
            "queue.buffering.max.messages": 200_000,
        })
        self._errors: list[str] = []
        self._counts: dict[str, int] = {}

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")
        else:
            key = (msg.topic(), msg.partition())
            self._delivered[key] = self._delivered.get(key, 0) + 1

    def _end_offsets(self, topic: str) -> dict[int, int]:
        try:
            extents = read_extents(self._bootstrap, [topic], client=self._client)
        except KafkaException as exc:
            raise PublishError(f"cannot read the end offsets of {topic}: {exc.args[0].str()}") from exc
        return {int(key.rsplit(":", 1)[1]): high for key, (_, high) in extents.items()}

    def publish(self, topic: str, key: bytes, value: bytes, timestamp_ms: int, partition: int | None = None) -> None:
        if self._verify and topic not in self._ends_before:
            self._ends_before[topic] = self._end_offsets(topic)
        kwargs = {"key": key, "value": value, "timestamp": timestamp_ms, "on_delivery": self._on_delivery}
        if partition is not None:
            if not 0 <= partition < self.partitions(topic):
                raise ValueError(f"partition {partition} out of range for {topic}")
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def partitions(self, topic: str) -> int:
        deadline = time.monotonic() + 10  # a topic just created may take a moment to show in metadata
        while topic not in self._counts:
            try:
                md = self._producer.list_topics(topic, timeout=10)
            except KafkaException as exc:
                raise PublishError(f"cannot read metadata of {topic}: {exc}") from exc
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions:
                self._counts[topic] = len(t.partitions)
            elif time.monotonic() > deadline:
                raise PublishError(f"topic {topic} does not exist: run `gpuledger stack up` first")
            else:
                time.sleep(0.2)
        return self._counts[topic]

    def flush(self) -> None:
        remaining = self._producer.flush(60)
        if remaining:
            raise PublishError(f"{remaining} records still undelivered after 60 s; is the broker up?")
        if self._errors:
            errors, self._errors = self._errors, []
            raise PublishError(f"{len(errors)} records failed, first: {errors[0]}")
        if self._verify:
            self._check_held()

    def _check_held(self) -> None:
        for topic, before in self._ends_before.items():
            delivered = {p: self._delivered.pop((topic, p), 0) for p in before}
            if not any(delivered.values()):
                continue
            after = self._end_offsets(topic)
            for p, start in before.items():
                short = delivered[p] - (after[p] - start)
                if short > 0:
                    raise PublishError(f"{topic} partition {p} holds {short} fewer records than the broker "
                                       "acknowledged: publish again (repeated records are taken once)")
            self._ends_before[topic] = after
