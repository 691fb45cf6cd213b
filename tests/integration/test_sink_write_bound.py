"""What one sink write holds is bounded by facts, whatever the mix of records on the fact
topics (sinks/fact_consumer.py ``SinkLoop.step``), on the real broker.

A fact topic may carry single facts (one a record: demand, requests, or a bulk kind from a
writer without batches) beside batch records of up to ~2,000 facts. A poll that sized its ask
by the records just read took single facts as the measure of the next records: behind a run of
them it asked for 1,000 records, and one write of a 1,024-GPU day took ~240,000 facts (50,000
asked for), the sink's memory peaking with it."""

from __future__ import annotations

import random
import sys
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from gpuledger.bus.topics import Topics, ensure_topics
from gpuledger.domain.facts import FactBatch
from gpuledger.sinks.base import MemoryStore
from gpuledger.sinks.fact_consumer import RECORD_FACTS_MAX, SinkLoop
from gpuledger.streams.fact_batches import emit_batched, split_batch
from gpuledger.streams.fact_codec import encode_fact
from stack_support import BOOTSTRAP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "streams"))
from avro_cases import random_fact  # noqa: E402

pytestmark = pytest.mark.integration

BATCH = 20_000  # facts a write asks for (sink_batch_records)
ROUNDS = 3
COPIES = 12  # the batch records again, behind each run of single facts


def test_a_write_holds_at_most_the_facts_asked_for_whatever_the_mix_of_records(broker):
    rng = random.Random(7)
    topics = Topics(f"bound{uuid.uuid4().hex[:8]}", 1)
    ensure_topics(BOOTSTRAP, topics)
    topic = topics.facts["utilization"].name  # one partition: the order below is the order read
    batched = [random_fact("utilization", rng) for _ in range(3_000)]
    full = []  # batch records of hundreds of facts each
    emit_batched(FactBatch(utilization=batched), {"utilization": topic},
                 lambda _topic, value, key, headers=None: full.append((value, key, headers)), lambda: None)
    per_full = [len(split_batch("utilization", v)) for v, _, _ in full]
    assert len(full) >= 3 and min(per_full[:-1]) > 100, per_full
    singles = [random_fact("utilization", rng) for _ in range(3_000)]  # one fact a record
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5})
    sent = 0
    for _ in range(ROUNDS):  # single facts ahead of full batch records, again and again
        for fact in singles:
            producer.produce(topic, encode_fact("utilization", fact), fact.fact_id.encode())
        for _ in range(COPIES):
            for value, key, headers in full:
                producer.produce(topic, value, key, headers=headers)
        sent += len(singles) + COPIES * sum(per_full)
    assert producer.flush(30) == 0

    store, dead = MemoryStore(), []
    loop = SinkLoop(BOOTSTRAP, topics, store, f"{topics.prefix}-sink", lambda *a: dead.append(a), lambda: None,
                    lambda _msg: None, threading.Lock(), lambda: False, batch_records=BATCH)
    writes = []
    try:
        idle = 0
        while sum(writes) < sent and idle < 40:  # the group's first assignment takes a few empty polls
            before = sum(loop.written.values())
            if loop.step(timeout_s=0.5):
                writes.append(sum(loop.written.values()) - before)
                idle = 0
            else:
                idle += 1
    finally:
        loop.close()
    assert not dead
    assert sum(writes) == sent, f"{sum(writes)} facts written of {sent} sent"
    assert max(writes) < BATCH + RECORD_FACTS_MAX, f"a write took {max(writes)} facts, {BATCH} asked for: {writes}"
    assert max(writes) >= BATCH // 2, f"writes far below what was asked for: {writes}"  # not one record a write
    assert set(store.utilization) == {f.fact_id for f in batched + singles}  # every fact
