"""The engine split over workers: each holds some units and reads the whole broadcast; the
union of their facts equals one engine holding every unit, no fact comes from two workers,
and a unit moved mid-stream through its snapshot (a rebalance, a restart) carries on to the
same facts. A late PodResources snapshot gives the in-order facts when it comes before its
segment is emitted, and leaves the written facts alone (counted stale) when it comes after."""

import random
from dataclasses import replace

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.demo.varied import varied_plan, write_varied
from gpuledger.domain.facts import FactBatch
from gpuledger.sinks.base import MemoryStore
from gpuledger.streams.engine import Engine
from pipeline import GRACE_MS, LATENESS_MS, STALE_CEILING_MS, ingest, partitioned
from plans import service_plan
from test_interleaving import _interleave

PARTS = 4


def _plan():
    return varied_plan(15, 20, jitter=0.2, missing=0.01, hours=3, seed=11, nodes=6, gpus_per_node=2)


def _records(tmp_path):
    topics, pub, _ = ingest(write_varied(_plan(), tmp_path / "cap"))
    topics = type(topics)("t", PARTS)
    records = partitioned(topics, pub.records)
    processed = {t.name for t in topics.processed()}
    return topics, [r for r in records if r[0] in processed]


def _extents(topics, records):
    ext = {f"{t.name}:{p}": (0, 0) for t in topics.processed() for p in range(t.partitions)}
    for topic, p, off, _ in records:
        ext[f"{topic}:{p}"] = (0, max(ext[f"{topic}:{p}"][1], off + 1))
    return ext


def _engine(topics, records, held):
    e = Engine(topics, lambda *a: None, STALE_CEILING_MS, GRACE_MS, lateness_ms=LATENESS_MS)
    e.extents, e.held = _extents(topics, records), held
    return e


def _feed(e: Engine, records, store: MemoryStore, batch: int = 300, held=None, closing: bool = True) -> None:
    for i, (topic, p, off, value) in enumerate(records):
        if topic in e.unit_topics and (held is None or p in held):
            e.handle_unit(topic, p, off, value)
        if topic in e.broadcast_topics:
            e.handle_broadcast(topic, p, off, value, dead_letter=topic not in e.unit_topics)
        if i % batch == batch - 1:
            store.write_facts(e.advance())
    store.write_facts(e.advance(closing))  # closing: the input ends here


def _facts(store: MemoryStore) -> dict:
    return {"capacity": dict(store.capacity), "utilization": dict(store.utilization)}


def test_units_split_over_workers_give_the_facts_of_one(tmp_path):
    topics, records = _records(tmp_path)
    assert len({p for t, p, _, _ in records if t == topics.dcgm.name}) >= 3, "the nodes spread over partitions"
    whole = MemoryStore()
    _feed(_engine(topics, records, None), _interleave(records, random.Random(1)), whole)
    assert whole.capacity and whole.utilization
    for split in ([{0, 1}, {2, 3}], [{0}, {1}, {2}, {3}], [{0, 2, 3}, {1}]):
        stores = []
        for k, held in enumerate(split):
            store = MemoryStore()
            _feed(_engine(topics, records, held), _interleave(records, random.Random(10 + k)), store,
                  batch=97 + 50 * k, held=held)
            stores.append(store)
        union = MemoryStore()
        for store in stores:
            union.write_facts(FactBatch(list(store.capacity.values()), list(store.utilization.values())))
        assert _facts(union) == _facts(whole), split
        ids = [fid for s in stores for fid in s.utilization]
        assert len(ids) == len(set(ids)), "a fact came from two workers"


def _service_records(tmp_path):
    """The vGPU plan: guests' samples wait in the units for their hosts' snapshots."""
    topics, pub, _ = ingest(write_capture(service_plan(), tmp_path / "svc"))
    topics = type(topics)("t", PARTS)
    processed = {t.name for t in topics.processed()}
    return topics, [r for r in partitioned(topics, pub.records) if r[0] in processed]


@pytest.mark.parametrize("records_of", [_records, _service_records], ids=["varied", "vgpu-guests"])
def test_a_unit_moved_through_its_snapshot_carries_on_to_the_same_facts(tmp_path, records_of):
    topics, records = records_of(tmp_path)
    whole = MemoryStore()
    _feed(_engine(topics, records, None), records, whole)
    assert whole.capacity and whole.utilization
    cut = len(records) // 2
    first = _engine(topics, records, None)
    moved = MemoryStore()
    _feed(first, records[:cut], moved, closing=False)  # it carries on elsewhere
    atts = [a for u in first.units.values() for a in u.attributors.values()]
    assert any(sc[1] for a in atts for st in a.nodes.values() for sc in st.pending_scrapes), "samples wait"
    if records_of is _service_records:
        assert any(a.guest_pending for a in atts), "guest samples wait"
    units = {n: orjson.loads(orjson.dumps(first.unit_state(n))) for n in first.units}  # through the changelog's JSON
    bcast = orjson.loads(orjson.dumps(first.broadcast_state()))
    second = _engine(topics, records, None)
    second.reset_broadcast(bcast)
    for n, st in units.items():
        assert second.add_unit(n, st), "the broadcast snapshot serves the unit"
    _feed(second, records[cut - 400:], moved)  # some records again: taken once
    assert _facts(moved) == _facts(whole)


def _late(records, topics, node_partition_offset, delay):
    """Move one PodResources record ``delay`` records later in its partition (a later offset);
    ``delay`` None: drop it."""
    out = [r for r in records]
    pr = [i for i, r in enumerate(out) if r[0] == topics.podresources.name and r[1] == node_partition_offset[0]]
    i = pr[node_partition_offset[1]]
    rec = out.pop(i)
    if delay is not None:
        same = [j for j, r in enumerate(out) if r[0] == rec[0] and r[1] == rec[1] and j >= i]
        out.insert(same[delay] if delay < len(same) else len(out), rec)
    # renumber the partition's offsets in the new order, as a broker would
    n, fixed = 0, []
    for r in out:
        if r[0] == rec[0] and r[1] == rec[1]:
            fixed.append((r[0], r[1], n, r[3]))
            n += 1
        else:
            fixed.append(r)
    return fixed


def test_a_late_snapshot_before_or_after_its_segment_is_emitted(tmp_path):
    topics, records = _records(tmp_path)
    part = next(p for t, p, _, _ in records if t == topics.podresources.name)
    strip = lambda f: replace(f, src_offset=0, fact_id="") if hasattr(f, "src_offset") else f  # noqa: E731

    def run(recs):
        e = _engine(topics, recs, None)
        store = MemoryStore()
        _feed(e, recs, store, batch=50)
        held = {}
        for f in store.capacity.values():
            key = (f.gpu_uuid, f.tenant_id, f.kind)
            held[key] = held.get(key, 0) + f.valid_to_ms - f.valid_from_ms
        return store, held, sum(a.counters.stale_snapshots for u in e.units.values() for a in u.attributors.values())

    in_order, held_in_order, _ = run(records)
    soon, held_soon, stale_soon = run(_late(records, topics, (part, 40), 2))
    assert held_soon == held_in_order and stale_soon == 0  # before its segment is emitted: the in-order facts
    later, held_later, stale_later = run(_late(records, topics, (part, 40), 400))
    assert stale_later == 1  # after: counted stale; the facts are those of a run that never had it
    without, held_without, _ = run(_late(records, topics, (part, 40), None))
    assert {strip(f) for f in later.capacity.values()} == {strip(f) for f in without.capacity.values()}
    assert held_later == held_without == held_in_order  # one snapshot less stands within the staleness limit
