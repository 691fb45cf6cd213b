"""The native worker floor (bench/worker_floor.c) reads a generated fleet's records as a worker's
units read them: every DCGM record's devices, every PodResources response, and a utilization
and a health fact per device sample in batch records the fact schemas read."""

import io
from dataclasses import dataclass

import fastavro
import pytest

from gpuledger.bench.fleet_gen import fleet_plan, publish_fleet
from gpuledger.bench.hotpath import MemoryPublisher
from gpuledger.bench.worker_floor import Floor, build
from gpuledger.bus.topics import Topics
from gpuledger.schemas import load_schema

SCHEMAS = {"utilization": "utilization_fact_batch", "health": "gpu_health_fact_batch"}


@dataclass
class Message:
    """What the floor reads of a confluent-kafka Message: the same four methods."""

    _value: bytes
    _topic: str
    _partition: int
    _offset: int

    def value(self):
        return self._value

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset


def _fleet():
    topics = Topics("floor", 4, 30)
    pub = MemoryPublisher()
    counts = publish_fleet(fleet_plan(16, 0.25, 10.0, 10.0), pub, topics, lambda _m: None)
    wanted = (topics.dcgm.name, topics.podresources.name)
    return topics, counts, [Message(v, t, p, i) for i, (t, p, v) in enumerate(pub.records) if t in wanted]


def _feed(floor: Floor, records, batch: int):
    return sum(floor.messages(records[i:i + batch]) for i in range(0, len(records), batch))


@pytest.mark.parametrize("batch", [1, 7, 10_000])
def test_the_floor_reads_every_record_and_makes_two_facts_a_sample(batch, tmp_path):
    topics, counts, records = _fleet()
    floor = Floor(build(tmp_path), topics.dcgm.name)
    assert _feed(floor, records, batch) == counts["device_samples"] > 0
    snapshots = sum(1 for m in records if m.topic() == topics.podresources.name)
    assert 0 < floor.changed.value < snapshots  # a node's unchanged responses are not kept again
    facts = {"utilization": [], "health": []}
    for kind, record in floor.take(flush=True):
        buf = io.BytesIO(record)
        got = fastavro.schemaless_reader(buf, fastavro.parse_schema(load_schema(SCHEMAS[kind], 1)), None)["facts"]
        assert buf.tell() == len(record) and got  # every byte read
        facts[kind] += got
    assert floor.take() == []
    for kind, got in facts.items():
        assert len(got) == counts["device_samples"], kind
        assert len({f["fact_id"] for f in got}) == len(got)
        assert {f["src_topic"] for f in got} == {topics.dcgm.name}


def test_a_record_that_is_not_a_fleets_is_refused_by_its_place_in_the_batch(tmp_path):
    topics, _counts, records = _fleet()
    floor = Floor(build(tmp_path), topics.dcgm.name)
    spoiled = Message(b"\x00\x00\x00\x00\x01\x02", topics.dcgm.name, 0, 9)
    with pytest.raises(ValueError, match="record 3 of the batch"):
        floor.messages(records[:3] + [spoiled])
    with pytest.raises(AttributeError, match="value"):  # what reading it raised
        floor.messages([object()])
