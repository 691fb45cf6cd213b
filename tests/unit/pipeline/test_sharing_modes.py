"""MIG and time-slicing on the in-memory twins against a plan with known truth."""

import pytest

from gpuledger.demo.cluster import write_capture
from pipeline import run_capture
from plans import H, M, SHARING_PROFILE_HOURS, SHARING_TRUTH, T0, expected_sharing_active_hours, sharing_plan


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    plan = sharing_plan()
    return plan, run_capture(write_capture(plan, tmp_path_factory.mktemp("cap")))[0]


def test_gpu_equivalent_hours_by_tenant_and_mode(run):
    _, mp = run
    got = {}
    for f in mp.store.capacity.values():
        if f.kind == "allocated":
            got[(f.tenant_id, f.mode)] = got.get((f.tenant_id, f.mode), 0.0) + f.gpu_hours
    assert got.keys() == SHARING_TRUTH.keys()
    for key, hours in SHARING_TRUTH.items():
        assert got[key] == pytest.approx(hours, abs=1e-9)


def test_mig_profile_hours_and_confidence(run):
    _, mp = run
    got = {}
    for f in mp.store.capacity.values():
        if f.kind == "allocated" and f.mode == "mig":
            got[(f.tenant_id, f.profile)] = got.get((f.tenant_id, f.profile), 0.0) + (f.valid_to_ms - f.valid_from_ms) / H
            assert f.confidence == "high"
    assert got == pytest.approx(SHARING_PROFILE_HOURS)
    assert {f.confidence for f in mp.store.capacity.values() if f.kind == "allocated" and f.mode == "timeslice"} == {
        "modeled"}


def test_parent_never_counted_twice_and_conservation_at_every_instant(run):
    plan, mp = run
    per_gpu: dict[str, list] = {}
    for f in mp.store.capacity.values():
        per_gpu.setdefault(f.gpu_uuid, []).append(f)
    for gpu, facts in per_gpu.items():
        cuts = sorted({f.valid_from_ms for f in facts} | {f.valid_to_ms for f in facts})
        for t in cuts[:-1]:
            total = sum(f.capacity_fraction for f in facts if f.valid_from_ms <= t < f.valid_to_ms)
            assert total == pytest.approx(1.0, abs=1e-9), (gpu, t)
        assert all(f.device_id != gpu for f in facts)  # the parent is never a unit of its own
    assert {f.kind for f in mp.store.capacity.values()} == {"allocated", "unallocated"}


def test_repartition_ends_the_old_instances(run):
    _, mp = run
    old = [f for f in mp.store.capacity.values() if f.mode == "mig" and f.profile == "1g.10gb"]
    assert max(f.valid_to_ms for f in old) == T0 + 90 * M
    new = [f for f in mp.store.capacity.values() if f.profile == "4g.40gb"]
    assert min(f.valid_from_ms for f in new) == T0 + 90 * M


def test_active_hours_mig_instance_and_modeled_timeslice_share(run):
    plan, mp = run
    facts = {f.fact_id: f for f in mp.store.capacity.values()}
    got = {}
    for u in mp.store.utilization.values():
        if u.confidence in ("high", "modeled"):
            fr = facts[u.capacity_fact_id].capacity_fraction
            got[u.tenant_id] = got.get(u.tenant_id, 0.0) + fr * u.span_ms * (u.sm_active_ratio or 0) / H
    for tenant, hours in expected_sharing_active_hours(plan).items():
        assert got[tenant] == pytest.approx(hours, rel=0.005)


def test_timeslice_series_repeated_per_pod_is_not_summed(run):
    plan, mp = run
    ts = plan.nodes["node-t"][0].uuid
    per_instant = {}
    for u in mp.store.utilization.values():
        if u.gpu_uuid == ts:
            per_instant.setdefault(u.observed_at_ms, []).append(u)
    assert {len(v) for v in per_instant.values()} == {4}  # one per replica, whatever the pod count
    both = per_instant[T0 + 45 * M]  # alpha's and beta's pods both report the series at 45 min
    assert {u.device_id for u in both} == {f"{ts}::{k}" for k in range(4)}
    assert len({u.sm_active_ratio for u in both}) == 1


def test_mig_parent_series_is_kept_apart(run):
    plan, mp = run
    parent = plan.nodes["node-m"][0].uuid
    reasons = {u.reason for u in mp.store.utilization.values() if u.device_id == parent}
    assert reasons == {"MIG parent GPU: its instances carry the attribution"}


def test_waiting_for_a_mig_profile_becomes_a_demand_fact(run):
    _, mp = run
    waits = [d for d in mp.store.demand.values() if d.outcome in ("scheduled", "ended without running")]
    (wait,) = [d for d in waits if d.profile]  # the other pods' waits for their devices: 5 s each
    assert {(d.outcome, d.waited_to_ms - d.waited_from_ms) for d in waits if not d.profile} == {("scheduled", 5_000)}
    ends = {d.pod_name: d.outcome for d in mp.store.demand.values() if d not in waits and d.outcome != "pending"}
    assert {d.pod_name for d in mp.store.demand.values() if d.outcome == "pending"} == {d.pod_name for d in waits}
    assert ends["wants-4g"] == "deleted" and "completed" in ends.values()  # every GPU pod's end is a fact too
    assert (wait.tenant_id, wait.pod_name, wait.profile, wait.instances) == ("gamma", "wants-4g", "4g.40gb", 1)
    assert (wait.waited_from_ms, wait.waited_to_ms) == (T0 + 20 * M, T0 + 80 * M)
    assert wait.outcome == "ended without running"
