"""The worker's producer on the real broker: at most 50,000 records wait for the broker (a
worker's memory does not follow how far the broker falls behind), flush returns once every
record is acknowledged, and a record the broker refuses makes flush fail naming its topic,
although acknowledged records raise no callback in Python (only failures are reported back)."""

from __future__ import annotations

import os
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from gpuledger.bus.acked import AckedProducer
from stack_support import BOOTSTRAP

pytestmark = pytest.mark.integration


def _topic(admin: AdminClient, **config: str) -> str:
    name = f"acked-{uuid.uuid4().hex[:10]}"
    for f in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        f.result(30)
    return name


def _count(topic: str) -> int:
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"count-{uuid.uuid4().hex}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    n, idle = 0, 0
    while idle < 3:
        msgs = [m for m in c.consume(10_000, 2.0) if not m.error()]
        n += len(msgs)
        idle = 0 if msgs else idle + 1
    c.close()
    return n


def test_flush_returns_once_every_record_is_on_the_topic(broker):
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    topic = _topic(admin)
    try:
        out = AckedProducer(BOOTSTRAP)
        deepest = 0
        for i in range(120_000):  # more than the queue holds: producing waits for the broker
            out.produce(topic, str(i).encode(), b"v" * 64)
            deepest = max(deepest, len(out.producer))
        out.flush()
        assert deepest <= 50_100  # records (and a few client events) waiting for the broker: bounded, memory too
        assert out.errors == []
        assert _count(topic) == 120_000
    finally:
        admin.delete_topics([topic])


def test_a_refused_record_makes_flush_fail_naming_its_topic(broker):
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    topic = _topic(admin, **{"max.message.bytes": "10000"})
    try:
        out = AckedProducer(BOOTSTRAP)
        out.produce(topic, b"small", b"v" * 100)
        out.produce(topic, b"large", os.urandom(200_000))  # over the limit even compressed: refused
        with pytest.raises(KafkaException, match=topic):
            out.flush()
        assert out.errors and all(e.startswith(f"{topic}: ") for e in out.errors)  # the batch it was in, refused whole
    finally:
        admin.delete_topics([topic])


def test_facts_handed_over_from_c_wait_out_a_full_queue_and_all_arrive(broker):
    """A worker's facts go to the producer through ``emit_encoded`` (runs of them from C): more
    than the queue holds, so the real producer refuses with BufferError and ``room`` waits; every
    fact arrives once, keyed by its id, with the bytes ``encode_fact`` gives."""
    import random
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "streams"))
    from avro_cases import random_fact

    from gpuledger.domain.facts import FactBatch
    from gpuledger.streams.fact_codec import FACT_KINDS, emit_encoded, encode_fact

    rng = random.Random(3)
    facts = [random_fact("utilization", rng) for _ in range(200)]
    batch = FactBatch(utilization=[f.__class__(**{**f.__dict__, "fact_id": f"u-{i}"}) for i in range(25_000)
                                   for f in (facts[i % 200],)])
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    topic = _topic(admin)
    try:
        out = AckedProducer(BOOTSTRAP)
        waits = []

        def room() -> None:
            waits.append(len(out.producer))
            out.room()
        sent = emit_encoded(batch, dict.fromkeys(FACT_KINDS, topic), out.producer.produce, room)
        out.flush()
        assert sent == 25_000 and waits, "the queue filled and was waited out"
        c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"facts-{uuid.uuid4().hex}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([topic])
        got, idle = {}, 0
        while idle < 3:
            msgs = [m for m in c.consume(10_000, 2.0) if not m.error()]
            for m in msgs:
                assert m.key() not in got
                got[m.key()] = m.value()
            idle = 0 if msgs else idle + 1
        c.close()
        assert len(got) == 25_000
        for i in rng.sample(range(25_000), 300):
            f = batch.utilization[i]
            assert got[f.fact_id.encode()] == encode_fact("utilization", f)
    finally:
        admin.delete_topics([topic])
