"""Reads the edges of a time window from a topic: per partition, the first and the last
``per_edge`` records whose Kafka timestamp (the source's ``observed_at``) falls in
``[from_ms, to_ms)``. What a closed period's context samples the source topics with: a value
that holds for a whole period (a driver version) shows at its edges, and a change within it
shows as two values."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from gpuledger.bus.offsets import watermarks

__all__ = ["window_edges"]


def window_edges(config: Mapping[str, object], topic: str, from_ms: int, to_ms: int, per_edge: int = 20,
                 timeout_s: float = 10.0) -> list[bytes]:
    consumer = Consumer({**config, "group.id": "gpuledger-window-sampler", "enable.auto.commit": False,
                         "log_level": 3})
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        out: list[bytes] = []
        for p in sorted(meta.partitions):
            low, high = watermarks(consumer, TopicPartition(topic, p), retry_s=timeout_s)
            # one lookup per time: a request naming a partition twice is answered once
            start, end = (consumer.offsets_for_times([TopicPartition(topic, p, t)], timeout=timeout_s)[0].offset
                          for t in (from_ms, to_ms))
            start = high if start < 0 else start  # -1: no record at or after the time
            end = high if end < 0 else end
            if start >= end:
                continue
            ranges = [(start, min(end, start + per_edge)), (max(start + per_edge, end - per_edge), end)]
            for a, b in ranges:
                if a < b:
                    out += _read(consumer, topic, p, a, b, from_ms, to_ms, timeout_s)
        return out
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, partition: int, a: int, b: int, from_ms: int, to_ms: int,
          timeout_s: float) -> list[bytes]:
    consumer.assign([TopicPartition(topic, partition, a)])
    out, position, idle = [], a, 0
    while position < b and idle < 3:
        batch = consumer.consume(num_messages=min(500, b - position), timeout=timeout_s / 3)
        idle = 0 if batch else idle + 1
        for msg in batch:
            if msg.error() or msg.offset() >= b:
                continue
            position = msg.offset() + 1
            if from_ms <= msg.timestamp()[1] < to_ms and msg.value() is not None:
                out.append(msg.value())
    return out
