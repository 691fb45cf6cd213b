"""A PodResources snapshot later than the grace fills the gap in evidence it falls in: new
capacity facts for time that had none, the same allocation an in-order run records; facts
already written are never changed. A late snapshot outside any gap is counted stale."""

from captures import split_lines
from gpuledger.demo.cluster import write_capture
from gpuledger.domain.timeutil import parse_rfc3339_ms
from pipeline import MemoryPipeline, ingest, partitioned, run_capture
from plans import truth_plan

GAP = (parse_rfc3339_ms("2026-10-01T01:00:00Z"), parse_rfc3339_ms("2026-10-01T01:06:00Z"))


def _in_gap(line: dict) -> bool:
    return line["node"] == "node-b" and GAP[0] < parse_rfc3339_ms(line["observed_at"]) < GAP[1]


def _late_run(tmp_path, late_dir, lateness_ms: int = 24 * 3_600_000):
    topics, early_pub, _ = ingest(tmp_path / "early")
    _, late_pub, _ = ingest(late_dir)
    records = partitioned(topics, early_pub.records + late_pub.records)  # late ones land at later offsets
    early, late = records[:len(early_pub.records)], records[len(early_pub.records):]
    mp = MemoryPipeline(topics, lateness_ms=lateness_ms)  # the late ones come after the whole capture
    mp.extents(records)
    mp.feed(early)
    return mp, late


def test_late_snapshots_fill_the_gap_with_the_in_order_facts(tmp_path):
    plan = truth_plan()
    full = write_capture(plan, tmp_path / "full")
    assert split_lines(full, tmp_path / "early", tmp_path / "late", "podresources.jsonl", _in_gap) == 11
    mp, late = _late_run(tmp_path, tmp_path / "late")
    b = {g.uuid for g in plan.nodes["node-b"]}
    before = {k: f for k, f in mp.store.capacity.items() if f.gpu_uuid in b}
    # the snapshot before the gap stands for one cadence (30 s); the rest is a gap in evidence
    assert not [f for f in before.values() if f.valid_from_ms < GAP[1] and f.valid_to_ms > GAP[0] + 30_000]
    assert [f for f in before.values() if f.valid_from_ms == GAP[0] and f.valid_to_ms == GAP[0] + 30_000]
    mp.feed(late)
    after = {k: f for k, f in mp.store.capacity.items() if f.gpu_uuid in b}
    assert {k: after[k] for k in before} == before  # nothing written is changed
    in_order, _ = run_capture(full)
    expected = {k: f for k, f in in_order.store.capacity.items() if f.gpu_uuid in b}
    assert _held_ms(after) == _held_ms(expected)
    # once what is left of the gap is within the grace it is a segment like any other: the
    # snapshots still to come inside it (64:30, 65:00, 65:30) add nothing and count as stale
    assert mp.proc.attributors["prod-ai-1"].counters.stale_snapshots == 3


def _held_ms(facts) -> dict:
    """Milliseconds per GPU, tenant, pod and kind: the allocation, whatever the fact boundaries."""
    out = {}
    for f in facts.values():
        key = (f.gpu_uuid, f.tenant_id, f.pod_uid, f.kind)
        out[key] = out.get(key, 0) + f.valid_to_ms - f.valid_from_ms
    return out


def test_a_late_snapshot_outside_a_gap_is_stale(tmp_path):
    plan = truth_plan()
    full = write_capture(plan, tmp_path / "full")
    split_lines(full, tmp_path / "early", tmp_path / "late", "podresources.jsonl", lambda line: False)
    (tmp_path / "again").mkdir()
    split_lines(full, tmp_path / "unused", tmp_path / "again" / "dup", "podresources.jsonl",
                lambda line: line["node"] == "node-a" and parse_rfc3339_ms(line["observed_at"]) == GAP[0])
    mp, late = _late_run(tmp_path, tmp_path / "again" / "dup")
    facts = dict(mp.store.capacity)
    mp.feed(late)
    assert mp.store.capacity == facts
    assert mp.proc.attributors["prod-ai-1"].counters.stale_snapshots == 1


def test_a_snapshot_later_than_the_allowed_lateness_leaves_the_gap(tmp_path):
    """The gap is forgotten once the node's snapshots are an allowed lateness past it: a
    snapshot arriving after that is stale, and the facts stay as written."""
    plan = truth_plan()
    full = write_capture(plan, tmp_path / "full")
    split_lines(full, tmp_path / "early", tmp_path / "late", "podresources.jsonl", _in_gap)
    mp, late = _late_run(tmp_path, tmp_path / "late", lateness_ms=30 * 60_000)
    facts = dict(mp.store.capacity)
    mp.feed(late)
    assert facts and mp.store.capacity == facts
    assert mp.proc.attributors["prod-ai-1"].counters.stale_snapshots == 11
