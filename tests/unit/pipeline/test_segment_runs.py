"""Consecutive PodResources segments that name the same pods are built as one segment
(domain/attribution.py ``_same_pods``, domain/capacity.py ``run_facts``): the facts are exactly those built
segment by segment and merged, field for field, source records included: on a generated
fleet with jitter, lost scrapes and PodResources on its own cadence (pods that end between
snapshots), and on a plan whose pod name is taken by a new pod from one snapshot to the next."""

import dataclasses
from dataclasses import replace

from gpuledger.bench.fleet_gen import fleet_plan
from gpuledger.demo.cluster import write_capture
from gpuledger.domain.attribution import Attributor
from pipeline import fleet_batches, run_capture
from plans import pod, truth_plan


def _rows(facts):
    return sorted(tuple(sorted(dataclasses.asdict(f).items())) for f in facts)


def _fleet_facts(plan) -> dict[str, list]:
    batches = fleet_batches(plan, 97)
    return {kind: _rows(f for b in batches for f in getattr(b, kind)) for kind in ("capacity", "utilization")}


def test_a_fleet_gives_the_same_facts_with_segments_built_as_one(monkeypatch):
    plan = fleet_plan(16, 2, cadence_s=15, pr_cadence_s=5, jitter=0.45, missing=0.2, seed=5)
    joined = _fleet_facts(plan)
    monkeypatch.setattr(Attributor, "_same_pods", lambda self, holders, a_ms, b_ms: False)
    apart = _fleet_facts(plan)
    assert len(apart["capacity"]) > 500 and len(apart["utilization"]) > 5000
    assert joined == apart


def test_a_pod_name_taken_by_a_new_pod_between_snapshots_ends_the_run(tmp_path, monkeypatch):
    base = truth_plan()
    pods = [p for p in base.pods if p.name != "trainer-0"]
    old, new = pod("alpha-ns", "worker-0", "node-b", (3,), 10, 61, 0.9, gen=1), pod(
        "alpha-ns", "worker-0", "node-b", (3,), 61, 140, 0.6, gen=2)
    swap_ms = old.end_ms + 27_000  # inside a capacity window: both pods' segments are emitted together
    pods += [replace(old, end_ms=swap_ms), replace(new, start_ms=swap_ms)]  # same name, new UID, back to back
    cap = write_capture(replace(base, pods=pods), tmp_path / "cap")
    joined, _ = run_capture(cap)
    monkeypatch.setattr(Attributor, "_same_pods", lambda self, holders, a_ms, b_ms: False)
    apart, _ = run_capture(cap)
    worker = [f for f in apart.store.capacity.values() if f.pod_name == "worker-0"]
    assert len({f.pod_uid for f in worker}) == 2
    for kind in ("capacity", "utilization"):
        assert _rows(getattr(joined.store, kind).values()) == _rows(getattr(apart.store, kind).values())
