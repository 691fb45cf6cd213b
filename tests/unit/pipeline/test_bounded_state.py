"""The engine's state is bounded by what is live: the same generated fleet run for 2 and for
8 event hours (pods of up to 4 h coming and going, every scrape crossing a snapshot) leaves
every container the engine keeps (the book's pods and namespace versions, forgotten UIDs,
demand emitted, each node's queued segments, gaps, pieces and waiting scrapes, guest
samples, offsets) no larger after 8 hours than after 2, give or take what is live at the
moment it is measured. History older than the late-data horizon is dropped; the facts about
it are already written."""

import pytest

from gpuledger.bench.fleet_gen import fleet_plan, publish_fleet
from gpuledger.bus.topics import Topics
from gpuledger.bus.port import ListPublisher
from gpuledger.streams.engine import Engine
from pipeline import GRACE_MS, LATENESS_MS, STALE_CEILING_MS, partitioned

GPUS, PARTS = 16, 2


def _retained(e: Engine) -> dict[str, int]:
    out: dict[str, int] = {}

    def add(key: str, n: int) -> None:
        out[key] = out.get(key, 0) + n

    atts = [*e.bcast.attributors.values(), *(a for u in e.units.values() for a in u.attributors.values())]
    for att in atts:
        book = att._book
        add("book pods", len(book.pods))
        add("book pod names", len(book.pods_by_name))
        add("book namespace versions", sum(len(v) for v in book.namespaces.values()))
        add("book tombstones", len(book.pod_tombstones) + len(book.namespace_tombstones))
        add("demand done", len(att.demand_done))
        add("guests", len(att.guest_pending) + len(att.guest_wm) + len(att.guest_open) + len(att.vgpu_index))
        for st in [*att.nodes.values(), *att.vgpu_hosts.values()]:
            add("segments and gaps", len(st.pending_segments) + len(st.gaps) + len(st.evidence_gaps))
            add("pieces", sum(len(p) for p in st.pieces.values()))
            add("waiting scrapes", len(st.pending_scrapes))
            add("cadences", len(st.snapshot_cadence.intervals_ms) + len(st.scrape_cadence.intervals_ms))
    for unit in e.units.values():
        add("offsets", len(unit.next_offsets) + len(unit.first_offsets) + len(unit.wm))
    add("offsets", len(e.bcast.next_offsets) + len(e.bcast.first_offsets) + len(e.bcast.partition_wm))
    add("pending output", len(e.references) + len(e.series_skipped))
    return out


def _run(hours: float) -> tuple[dict[str, int], int]:
    """The most each container held, measured after every batch; and the facts emitted."""
    topics = Topics("bounded", PARTS)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    publish_fleet(fleet_plan(GPUS, hours, 10, 10), pub, topics, lambda _: None)
    records = partitioned(topics, pub.records)
    e = Engine(topics, lambda *a: None, STALE_CEILING_MS, GRACE_MS, lateness_ms=LATENESS_MS)
    e.extents = {f"{t.name}:{p}": (0, 0) for t in topics.processed() for p in range(t.partitions)}
    for topic, p, off, _ in records:
        if f"{topic}:{p}" in e.extents:
            e.extents[f"{topic}:{p}"] = (0, off + 1)
    most: dict[str, int] = {}
    facts = 0
    for i in range(0, len(records), 500):
        for topic, p, off, value in records[i:i + 500]:
            if topic in e.unit_topics:
                e.handle_unit(topic, p, off, value)
            if topic in e.broadcast_topics:
                e.handle_broadcast(topic, p, off, value, dead_letter=topic not in e.unit_topics)
        batch = e.advance()
        facts += len(batch.capacity) + len(batch.utilization)
        e.take_references()
        e.take_series_skipped()
        for key, n in _retained(e).items():
            most[key] = max(most.get(key, 0), n)
    return most, facts


@pytest.fixture(scope="module")
def runs():
    return _run(2), _run(8)


def test_state_does_not_grow_with_the_hours(runs):
    (short, short_facts), (long, long_facts) = runs
    assert long_facts > 3 * short_facts  # four times the hours went through
    grown = {k: (short.get(k, 0), n) for k, n in long.items() if n > 1.25 * short.get(k, 0) + 4}
    assert not grown, f"retained after 8 h vs after 2 h (most held): {grown}"


def test_history_is_dropped_behind_the_horizon(runs):
    (short, _), (long, _) = runs
    plan = fleet_plan(GPUS, 8, 10, 10)
    assert long["book pods"] < len(plan.pods)  # every pod of the 8 h was seen; most are forgotten
