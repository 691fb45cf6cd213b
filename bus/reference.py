"""The newest reference document of one kind for one cluster, read from the reference topic
itself (not the store), so a decision appended before ``process`` ran is never lost."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from gpuledger.bus.topics import Topics
from gpuledger.schemas import Codec

__all__ = ["latest_reference"]


def latest_reference(bootstrap: str, topics: Topics, cluster_id: str, kind: str,
                     client: Mapping[str, str] | None = None) -> str | None:
    """The ``document_json`` last published under ``cluster/kind``, or None."""
    key = f"{cluster_id}/{kind}".encode()
    codec = Codec(topics.reference.schema)
    consumer = Consumer({"bootstrap.servers": bootstrap, **(client or {}), "group.id": "gpuledger-reference-reader",
                         "enable.auto.commit": False, "log_level": 3})
    try:
        tp = TopicPartition(topics.reference.name, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=10)
        if high <= low:
            return None
        consumer.assign([TopicPartition(tp.topic, 0, OFFSET_BEGINNING)])
        last, position = None, low
        while position < high:
            for msg in consumer.consume(num_messages=500, timeout=1.0):
                if msg.error():
                    continue
                position = msg.offset() + 1
                if msg.key() == key:
                    last = msg.value()
        return None if last is None else codec.decode(last)["document_json"]
    finally:
        consumer.close()
