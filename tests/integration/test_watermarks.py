"""The watermarks of a partition that is still being set up: read once it is there, instead of
failing the worker that just created it (bus/offsets.py ``watermarks``, used where a worker reads
its changelog at start)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gpuledger.bus.offsets import watermarks
from stack_support import BOOTSTRAP

pytestmark = pytest.mark.integration


def _consumer() -> Consumer:
    return Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"wm-{uuid.uuid4().hex}", "log_level": 3})


def test_a_partition_that_appears_while_waiting_is_read(broker):
    name = f"wm-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})

    def create_later():
        time.sleep(1.5)
        for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
            f.result(30)

    consumer = _consumer()
    try:
        with pytest.raises(KafkaException):  # the partition is not there: the plain call fails at once
            consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
        maker = threading.Thread(target=create_later)
        maker.start()
        t0 = time.monotonic()
        assert watermarks(consumer, TopicPartition(name, 0), retry_s=30) == (0, 0)
        assert time.monotonic() - t0 >= 1.0  # it waited for the topic
        maker.join()
    finally:
        consumer.close()


def test_a_partition_that_never_appears_fails_after_the_wait(broker):
    consumer = _consumer()
    try:
        t0 = time.monotonic()
        with pytest.raises(KafkaException):
            watermarks(consumer, TopicPartition(f"wm-never-{uuid.uuid4().hex[:10]}", 0), retry_s=1.0)
        assert 1.0 <= time.monotonic() - t0 < 15
    finally:
        consumer.close()
