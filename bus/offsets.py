"""End offsets and commits: the low and high offset of every partition of some topics
(``AdminClient.list_offsets``), and a consumer group's commits that ride out rebalances and a
restarting coordinator."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

__all__ = ["commit_offsets", "committed_offsets", "read_extents", "watermarks"]

T = TypeVar("T")

# commit refusals that mean "not now" (a rebalance, a coordinator moving or restarting): the
# state written before is the truth, so the next commit (by this worker or the unit's next
# owner) catches up; nothing is read past an uncommitted offset
_COMMIT_LATER = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                 KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                 KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT,
                 KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._WAIT_COORD,
                 KafkaError._NO_OFFSET, KafkaError._STATE, KafkaError._DESTROY}

_NO_LEADER_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._TIMED_OUT,
                  KafkaError._TRANSPORT}


def read_extents(bootstrap: str, topic_names: list[str], retry_s: float = 30.0,
                 client: Mapping[str, str] | None = None) -> dict[str, tuple[int, int]]:
    """Low and high offsets of every partition of the topics ("topic:partition" -> (low, high));
    retried for a while when a partition has no leader for a moment."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {}), "log_level": 3})
    deadline = time.monotonic() + retry_s
    while True:
        try:
            md = admin.list_topics(timeout=10).topics
            tps = [TopicPartition(name, p) for name in topic_names for p in sorted(md[name].partitions)]
            ends = {}
            for spec, slot in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 1)):
                futures = admin.list_offsets({tp: spec for tp in tps}, request_timeout=10)
                for tp, fut in futures.items():
                    ends.setdefault(f"{tp.topic}:{tp.partition}", [0, 0])[slot] = fut.result().offset
            return {f"{tp.topic}:{tp.partition}": tuple(ends[f"{tp.topic}:{tp.partition}"]) for tp in tps}
        except (KafkaException, KeyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def watermarks(consumer: Consumer, tp: TopicPartition, retry_s: float = 30.0) -> tuple[int, int]:
    """Low and high offset of one partition; retried for ``retry_s`` while the partition is not
    there yet or has no leader for a moment (a topic just created: the controller has named a
    leader that does not lead it yet) or the broker is briefly unreachable."""
    return _retried(lambda: consumer.get_watermark_offsets(tp, timeout=10), retry_s, _NO_LEADER_YET, 0.2)


def commit_offsets(consumer: Consumer, offsets: list[TopicPartition], progress: Callable[[str], None]) -> bool:
    """Commit synchronously; False (said once) when the group cannot take it now."""
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
        return True
    except KafkaException as exc:
        err = exc.args[0]
        if err.code() in _COMMIT_LATER or err.retriable():
            progress(f"commit deferred ({err.str()}): the next commit catches up")
            return False
        raise


def committed_offsets(consumer: Consumer, partitions: list[TopicPartition], wait_s: float = 120) -> list[TopicPartition]:
    """The group's committed offsets, waiting out a coordinator that is (re)starting."""
    return _retried(lambda: consumer.committed(partitions, timeout=10), wait_s, _COMMIT_LATER, 0.5)


def _retried(call: Callable[[], T], wait_s: float, codes: set, pause_s: float) -> T:
    """``call()``, again every ``pause_s`` for ``wait_s`` while it raises a retriable Kafka error
    or one of ``codes``; then that error."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            if time.monotonic() > deadline or not (exc.args[0].retriable() or exc.args[0].code() in codes):
                raise
            time.sleep(pause_s)
