"""The workers' changelogs on Kafka: a unit's latest snapshot on its partition of the unit
state topic (keyed ``unit-N``), the broadcast's on the broadcast state topic. Both compacted,
so a reader takes the last value of its key from the start of the partition."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from gpuledger.bus.offsets import watermarks
from gpuledger.bus.topics import STATE_MAX_BYTES, Topics

__all__ = ["Changelog", "last_value"]

BROADCAST_KEY = b"broadcast"


def largest_parts(state: object, depth: int = 4, width: int = 3) -> str:
    """Where a snapshot's bytes are: the largest entries, following the largest one down."""
    path, levels = [], []
    while depth and isinstance(state, dict) and state:
        sizes = sorted(((len(orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS)), str(k)) for k, v in state.items()),
                       reverse=True)
        levels.append(", ".join(f"{'.'.join([*path, k])}={n >> 10} KiB" for n, k in sizes[:width]))
        path.append(sizes[0][1])
        state = next(v for k, v in state.items() if str(k) == sizes[0][1])
        depth -= 1
        if isinstance(state, list) and state:
            levels.append(f"{'.'.join(path)} has {len(state)} entries")
    return "; ".join(levels)


class Changelog:
    def __init__(self, bootstrap: str, topics: Topics, producer: Producer,
                 client: Mapping[str, str] | None = None) -> None:
        self.bootstrap, self.topics, self.producer, self.client = bootstrap, topics, producer, dict(client or {})
        self.written_bytes = 0
        self.last_bytes: dict[str, int] = {}  # each part's latest snapshot size

    def write_unit(self, number: int, state: dict) -> None:
        self._write(self.topics.unit_state.name, number, f"unit-{number}".encode(), state)

    def write_broadcast(self, state: dict) -> None:
        self._write(self.topics.broadcast_state.name, 0, BROADCAST_KEY, state)

    def _write(self, topic: str, partition: int, key: bytes, state: dict) -> None:
        value = orjson.dumps(state, option=orjson.OPT_NON_STR_KEYS)
        if len(value) > STATE_MAX_BYTES:
            raise RuntimeError(f"{key.decode()} state is {len(value) >> 20} MiB, over the {STATE_MAX_BYTES >> 20} MiB a "
                               f"snapshot may take ({largest_parts(state)}): more live state than one unit should "
                               "hold; add source partitions")
        self.written_bytes += len(value)
        self.last_bytes[key.decode()] = len(value)
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, partition=partition)
                return
            except BufferError:
                self.producer.poll(0.1)

    def read_unit(self, number: int) -> dict | None:
        return self._read(self.topics.unit_state.name, number, f"unit-{number}".encode())

    def read_broadcast(self) -> dict | None:
        return self._read(self.topics.broadcast_state.name, 0, BROADCAST_KEY)

    def _read(self, topic: str, partition: int, key: bytes) -> dict | None:
        last = last_value({"bootstrap.servers": self.bootstrap, **self.client,
                           "group.id": "gpuledger-changelog-reader", "fetch.max.bytes": 2 * STATE_MAX_BYTES,
                           "max.partition.fetch.bytes": 2 * STATE_MAX_BYTES,
                           "receive.message.max.bytes": 2 * STATE_MAX_BYTES + 1_000_000}, topic, partition, key)
        return orjson.loads(last) if last is not None else None


def last_value(config: Mapping[str, object], topic: str, partition: int, key: bytes) -> bytes | None:
    """The value last written under ``key`` to one partition (read from its start), or None."""
    consumer = Consumer({**config, "enable.auto.commit": False, "log_level": 3})
    try:
        low, high = watermarks(consumer, TopicPartition(topic, partition))
        if high <= low:
            return None
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        last, position = None, low
        while position < high:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error():
                    continue
                position = msg.offset() + 1
                if msg.key() == key:
                    last = msg.value()
        return last
    finally:
        consumer.close()
