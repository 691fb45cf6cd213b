"""Reading is paced by event time on the real broker, whatever the fetches hand over.

A generated fleet (4 nodes of 8 H100s, 3 h of 10-s scrapes and PodResources snapshots on
each node's own clock) is published in time order. One fetch of the PodResources partition
brings its whole 3 h (small records, compressed ~40x) while a fetch of DCGM brings minutes,
so a worker that only paused partitions after taking what a fetch delivered held hours of
allocation pieces waiting for the scrapes. Every unit snapshot the worker writes (one per
batch here) must show its sources within the read-ahead of each other, and the showback
must still equal the plan's truth.
"""

from __future__ import annotations

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from gpuledger.bench.fleet import check_showback
from gpuledger.bench.fleet_gen import fleet_plan, fleet_truth, publish_fleet
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.topics import Topics, ensure_topics
from gpuledger.domain.timeutil import format_rfc3339
from stack_support import BOOTSTRAP, GPULEDGER

pytestmark = pytest.mark.integration

READ_AHEAD_S = 120
CADENCE_S = 10
PARTITIONS = 2


def unit_snapshots(topic: str) -> list[dict]:
    """Every snapshot written to the unit state topic (not yet compacted: a fresh topic's
    active segment is never compacted)."""
    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "paced-reading-check", "enable.auto.commit": False,
                  "fetch.max.bytes": 80 << 20, "max.partition.fetch.bytes": 80 << 20,
                  "receive.message.max.bytes": 81 << 20})
    try:
        out = []
        for p in range(PARTITIONS):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            c.assign([TopicPartition(topic, p, low)])
            pos = low
            while pos < high:
                for m in c.consume(100, timeout=5.0):
                    if not m.error():
                        out.append(orjson.loads(m.value()))
                        pos = m.offset() + 1
        return out
    finally:
        c.close()


def test_sources_stay_within_the_read_ahead_and_facts_equal_the_truth(stack):
    topics = Topics(stack.prefix, PARTITIONS)
    ensure_topics(BOOTSTRAP, topics)
    plan = fleet_plan(32, 3, CADENCE_S, CADENCE_S)
    truth = {**fleet_truth(plan), "cadence_s": CADENCE_S, "hours": 3,
             "from": format_rfc3339(plan.start_ms), "to": format_rfc3339(plan.end_ms)}
    pub = KafkaPublisher(BOOTSTRAP)
    publish_fleet(plan, pub, topics, lambda _: None)
    pub.flush()

    stack.extra_env.update({"GPULEDGER_READ_AHEAD_S": str(READ_AHEAD_S), "GPULEDGER_CHECKPOINT_INTERVAL_S": "0",
                            "GPULEDGER_SOURCE_PARTITIONS": str(PARTITIONS)})
    stack.run("process", "--until-caught-up", timeout=900)

    snapshots = unit_snapshots(topics.unit_state.name)
    leads = []
    for snap in snapshots:
        wm = snap["wm"]
        pr, dcgm = wm.get(topics.podresources.name), wm.get(topics.dcgm.name)
        if pr is not None and dcgm is not None:
            leads.append(abs(pr - dcgm))
    assert len(leads) >= 20, f"only {len(leads)} unit snapshots with both sources: too few to judge the pacing"
    # the read-ahead, plus one record step of the partition holding the floor (each node's own clock)
    assert max(leads) <= (READ_AHEAD_S + 2 * CADENCE_S) * 1000, (
        f"a unit held PodResources and DCGM {max(leads) / 1000:.0f} s apart (read-ahead {READ_AHEAD_S} s)")

    check = check_showback(GPULEDGER, stack.env(), stack.home, truth)
    assert check["ok"], check
