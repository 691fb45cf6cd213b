"""A node's PodResources response is read once while it stays the same (streams/engine.py
``Unit.holders_seen``): the facts equal those of an engine that reads every response anew, a
changed response is read anew, and a malformed one is dead-lettered every time it comes."""

import orjson

from gpuledger.schemas import Codec
from gpuledger.sinks.base import MemoryStore
from test_partitioned_units import _engine, _facts, _feed, _records


class Forgetful(list):
    """The records, handing each one out after the engine forgot every response it read."""

    def __init__(self, records, engine):
        super().__init__(records)
        self.engine = engine

    def __iter__(self):
        for record in super().__iter__():
            for unit in self.engine.units.values():
                unit.holders_seen.clear()
            yield record


def test_reading_a_response_once_gives_the_facts_of_reading_it_every_time(tmp_path):
    topics, records = _records(tmp_path)
    snapshots = [r for r in records if r[0] == topics.podresources.name]
    codec = Codec(topics.podresources.schema)
    texts = [codec.decode(v)["response_json"] for _, _, _, v in snapshots]
    assert len(set(texts)) < len(texts) / 2, "most snapshots repeat the one before"

    cached, fresh = _engine(topics, records, None), _engine(topics, records, None)
    got_cached, got_fresh = MemoryStore(), MemoryStore()
    _feed(cached, records, got_cached)
    _feed(fresh, Forgetful(records, fresh), got_fresh)
    assert got_cached.capacity and got_cached.utilization
    assert _facts(got_cached) == _facts(got_fresh)
    nodes = {(r["cluster_id"], r["node"]) for r in map(codec.decode, (v for _, _, _, v in snapshots))}
    assert sorted(k for u in cached.units.values() for k in u.holders_seen) == sorted(nodes)
    assert all(not u.holders_seen for u in fresh.units.values())


def test_a_changed_response_is_read_anew_and_a_malformed_one_refused_each_time(tmp_path):
    topics, records = _records(tmp_path)
    codec = Codec(topics.podresources.schema)
    topic, part, _, value = next(r for r in records if r[0] == topics.podresources.name)
    first = codec.decode(value)
    dead = []
    e = _engine(topics, records, None)
    e.dead_letter = lambda src, reason, raw: dead.append(reason)

    def put(offset, response_json, at_ms):
        record = {**first, "response_json": response_json, "observed_at_ms": at_ms, "ingested_at_ms": at_ms}
        e.handle_unit(topic, part, offset, codec.encode(record))

    t0 = first["observed_at_ms"]
    put(0, first["response_json"], t0)
    put(1, first["response_json"], t0 + 10_000)
    unit, key = e.units[part], (first["cluster_id"], first["node"])
    state = unit.attributors[first["cluster_id"]].nodes[first["node"]]
    seen = unit.holders_seen[key][1]
    assert state.last_holders is seen and state.pending_segments[-1][2] is seen

    holder = {"name": "other", "namespace": "elsewhere",
              "containers": [{"name": "c", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-new"]}]}]}
    changed = orjson.dumps({"podResources": [holder]}).decode()
    put(2, changed, t0 + 20_000)
    assert state.last_holders == {"GPU-new": ("elsewhere", "other", "c", "nvidia.com/gpu")}
    assert unit.holders_seen[key][0] == changed

    for offset in (3, 4):
        put(offset, '{"podResources": [{"name": 7}]}', t0 + 10_000 * offset)
    assert len(dead) == 2 and all("PodResourcesError" in reason for reason in dead)
    assert unit.holders_seen[key][0] == changed and state.last_ms == t0 + 20_000
