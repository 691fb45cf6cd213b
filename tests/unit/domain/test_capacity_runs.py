"""Consecutive PodResources segments that change nothing for a unit make one capacity fact;
anything that differs (holder, tenant, kind, a gap) starts another, and a fact never spans
segments that start in two capacity windows."""

from gpuledger.demo.varied import varied_plan, write_varied
from gpuledger.domain.capacity import CAPACITY_WINDOW_MS, Segment, make_fact, merge_runs
from gpuledger.domain.facts import SourcePos
from pipeline import MemoryPipeline, ingest, partitioned, run_capture

T0 = 1_790_812_800_000  # a window edge
OWNER = {"namespace": "team-a", "pod_name": "train-0", "container": "main", "pod_uid": "uid-1",
         "namespace_uid": "ns-1", "tenant_id": "alpha", "project_id": "p1"}


def _fact(device: str, a: int, b: int, offset: int, owner=OWNER, kind="allocated"):
    seg = Segment("c1", "node-a", a, b, SourcePos("pr", 0, offset))
    return make_fact(seg, device.split("::")[0], device, "H100", "exclusive", "", 1.0, a, b, kind,
                     owner, "high" if owner else "", "")


def test_touching_equal_facts_become_one_named_by_the_merged_bounds_and_the_first_snapshot():
    items = [_fact("GPU-a", T0, T0 + 10_000, 5), _fact("GPU-a", T0 + 10_000, T0 + 20_000, 6),
             _fact("GPU-a", T0 + 20_000, T0 + 30_000, 7)]
    (device, fact, piece), = merge_runs(items)
    direct = _fact("GPU-a", T0, T0 + 30_000, 5)[1]
    assert device == "GPU-a" and fact == direct  # the id hashes the merged bounds, as a fact made whole
    assert fact.fact_id not in {f.fact_id for _, f, _ in items}
    assert (piece.start_ms, piece.end_ms, piece.fact_id, piece.tenant_id) == (T0, T0 + 30_000, fact.fact_id, "alpha")


def test_a_single_fact_passes_unchanged():
    item = _fact("GPU-a", T0, T0 + 10_000, 5)
    assert merge_runs([item]) == [item]


def test_what_differs_or_does_not_touch_stays_apart():
    other = {**OWNER, "pod_uid": "uid-2", "pod_name": "train-1"}
    items = [_fact("GPU-a", T0, T0 + 10_000, 1),
             _fact("GPU-a", T0 + 10_000, T0 + 20_000, 2, owner=other),  # another pod
             _fact("GPU-a", T0 + 20_000, T0 + 30_000, 3, owner=None, kind="unallocated"),
             _fact("GPU-a", T0 + 40_000, T0 + 50_000, 4, owner=None, kind="unallocated")]  # a gap before it
    assert merge_runs(items) == items
    retenant = {**OWNER, "tenant_id": "beta"}
    pair = [_fact("GPU-a", T0, T0 + 10_000, 1), _fact("GPU-a", T0 + 10_000, T0 + 20_000, 2, owner=retenant)]
    assert merge_runs(pair) == pair


def test_units_interleaved_merge_each_on_its_own():
    items = []
    for k in range(3):
        a, b = T0 + k * 10_000, T0 + (k + 1) * 10_000
        items += [_fact("GPU-a", a, b, k), _fact("GPU-b", a, b, k)]
    out = merge_runs(items)
    assert [(d, f.valid_from_ms, f.valid_to_ms, f.src_offset) for d, f, _ in out] == [
        ("GPU-a", T0, T0 + 30_000, 0), ("GPU-b", T0, T0 + 30_000, 0)]


def _varied_run(tmp_path, pr_s: int):
    plan = varied_plan(10, pr_s, 0.2, 0.0, hours=1, seed=pr_s)
    mp, _ = run_capture(write_varied(plan, tmp_path / f"pr{pr_s}"))
    return plan, mp


def test_a_fact_spans_the_segments_starting_in_one_window_and_no_more(tmp_path):
    plan, mp = _varied_run(tmp_path, 10)
    facts = list(mp.store.capacity.values())
    assert facts
    longest_interval_ms = 10_000 * 1.2 * 2  # jitter: one snapshot interval at most ~ 12 s; room for one late
    for f in facts:
        window_start = f.valid_from_ms // CAPACITY_WINDOW_MS * CAPACITY_WINDOW_MS
        assert f.valid_to_ms <= window_start + CAPACITY_WINDOW_MS + longest_interval_ms, f
    # with snapshots every ~10 s most facts stand for several of them
    per_gpu_snapshots = 3600 / 10
    assert len(facts) < sum(len(g) for g in plan.nodes.values()) * per_gpu_snapshots / 3


def test_a_bounded_run_emits_its_last_window_only_when_it_closes(tmp_path):
    plan = varied_plan(10, 10, 0.0, 0.0, hours=1, seed=3)
    topics, pub, _ = ingest(write_varied(plan, tmp_path / "cap"))
    records = partitioned(topics, pub.records)
    mp = MemoryPipeline(topics)
    mp.extents(records)
    for topic, p, off, value in records:
        mp.proc.handle(topic, p, off, value)
    mp.proc.flush()
    open_end = max(f.valid_to_ms for f in mp.store.capacity.values())
    mp.proc.flush(closing=True)
    closed_end = max(f.valid_to_ms for f in mp.store.capacity.values())
    assert open_end < closed_end  # the last window waited for a snapshot past it, then went out whole
    assert closed_end - open_end <= CAPACITY_WINDOW_MS


def test_closing_emits_the_segments_the_watch_made_final_even_inside_a_window(tmp_path):
    """The watch's last word (a bookmark, on every partition) falls well inside a minute while
    snapshots go on: a bounded run ends with the segments it made final, not with the window
    before it (nor with nothing)."""
    from gpuledger.schemas import Codec
    plan = varied_plan(10, 10, 0.0, 0.0, hours=1, seed=3, start_ms=T0 + 35_000)  # bookmarks 35 s into a minute
    topics, pub, _ = ingest(write_varied(plan, tmp_path / "cap"))
    records = partitioned(topics, pub.records)
    watch = Codec("k8s_watch_event")
    times = {r: watch.decode(r[3]) for r in records if r[0] == topics.k8s.name}
    stop = max(e["observed_at_ms"] for e in times.values() if e["event_type"] == "BOOKMARK"
               and 25_000 <= e["observed_at_ms"] % CAPACITY_WINDOW_MS < 55_000
               and e["observed_at_ms"] < plan.end_ms - 5 * 60_000)
    kept = [r for r in records if r not in times or times[r]["observed_at_ms"] <= stop]
    mp = MemoryPipeline(topics)
    mp.extents(kept)
    mp.feed(kept)
    end = max(f.valid_to_ms for f in mp.store.capacity.values())
    window_start = stop // CAPACITY_WINDOW_MS * CAPACITY_WINDOW_MS
    assert window_start + 10_000 < end <= stop  # what the bookmark made final, inside its window
