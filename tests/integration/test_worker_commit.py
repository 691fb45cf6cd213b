"""Offsets follow durability on the real broker: whenever a worker commits (its checkpoint, a
rebalance taking units away, a stop), the facts of every record its snapshot counts are on
the fact topics already.

A request is a fact the moment its record is read. Records parked ahead of the read-ahead
are taken at the end of a pass, after that pass's facts were produced; a commit before the
next pass (a rebalance served by the next poll, or a stop) counted them in the unit's
snapshot and offsets while their facts were only in memory. When the unit then moved (a
replay's workers joining one by one) or the worker stopped, the next owner restored the unit
past them and the requests were never written: a 4-process replay of a closed month came
out with 1 of its 7 request facts.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from gpuledger.bus.offsets import read_extents
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.topics import Topics, ensure_topics
from gpuledger.config import Settings
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.capture import LinePublisher
from gpuledger.streams.runtime import Worker, WorkerJob
from stack_support import BOOTSTRAP

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
REQUESTS = 7


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _keys(topic: str) -> list[bytes]:
    extents = read_extents(BOOTSTRAP, [topic])
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "log_level": 3})
    try:
        out = []
        for key, (low, high) in extents.items():
            if high <= low:
                continue
            c.assign([TopicPartition(topic, int(key.rsplit(":", 1)[1]), low)])
            pos = low
            while pos < high:
                for m in c.consume(100, timeout=5.0):
                    if not m.error():
                        out.append(m.key())
                        pos = m.offset() + 1
        return out
    finally:
        c.close()


def test_a_commit_right_after_parked_requests_were_taken_has_their_facts_out(broker, tmp_path):
    """A requests-only unit (an endpoint's partition with no node on it): every request is
    parked when fetched and taken at the end of a pass; the worker stops at the first moment
    after that, before another pass, and its final commit must carry their facts."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    topics = Topics(prefix, 1)
    ensure_topics(BOOTSTRAP, topics)
    pub = KafkaPublisher(BOOTSTRAP)
    lines = LinePublisher(pub, topics, "c1", _wall_ms)
    start = _wall_ms() - 12 * HOUR_MS
    for i in range(REQUESTS):
        t = start + i * HOUR_MS
        lines.put("requests.jsonl", {"observed_at": format_rfc3339(t), "endpoint_id": "batch-api", "model": "m",
                                     "request_id": f"r-{i}", "tenant_id": "alpha", "prompt_tokens": 1000,
                                     "completion_tokens": 500, "e2e_s": 3.0, "outcome": "success"}, f"requests:{i}")
    pub.flush()
    assert lines.summary.records[topics.requests.name] == REQUESTS, lines.summary.render()

    settings = Settings(kafka_bootstrap=BOOTSTRAP, topic_prefix=prefix, source_partitions=1, home=tmp_path)
    group = f"{prefix}-process"
    requests = f"{topics.requests.name}:0"
    said: list[str] = []

    def taken_all() -> bool:
        unit = worker.engine.units.get(0)
        return unit is not None and unit.next_offsets.get(requests, 0) >= REQUESTS

    worker = Worker(settings, WorkerJob(topics, group, until_caught_up=False), said.append, _wall_ms, taken_all)
    assert worker.run() == 0

    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": group, "log_level": 3})
    try:
        committed = c.committed([TopicPartition(topics.requests.name, 0)], timeout=10)[0].offset
    finally:
        c.close()
    assert committed == REQUESTS, said
    facts = _keys(topics.facts["requests"].name)
    assert len(facts) == len(set(facts)) == REQUESTS, (
        f"the worker committed {committed} requests; the fact topic holds {len(facts)} request facts "
        f"({len(set(facts))} distinct)")
