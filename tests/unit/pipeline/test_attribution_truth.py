"""The full processing path on the in-memory twins against a plan with known truth."""

import pytest

from gpuledger.demo.cluster import write_capture
from plans import H, M, T0, expected_active_hours, expected_allocated_hours, truth_plan
from pipeline import run_capture


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    plan = truth_plan()
    cap = write_capture(plan, tmp_path_factory.mktemp("cap"))
    mp, _ = run_capture(cap)
    return plan, mp


def _by_tenant(facts, value):
    out = {}
    for f in facts:
        if f.tenant_id:
            out[f.tenant_id] = out.get(f.tenant_id, 0.0) + value(f)
    return out


def test_allocated_hours_exact_per_tenant(run):
    plan, mp = run
    got = _by_tenant([f for f in mp.store.capacity.values() if f.kind == "allocated"], lambda f: f.gpu_hours)
    want = expected_allocated_hours(plan)
    assert want == pytest.approx({"alpha": 3.5, "beta": 0.5 + 50 / 60, "gamma": 1.5 + 1.0}, abs=1e-12)
    assert got.keys() == want.keys()
    for tenant in want:
        assert got[tenant] == pytest.approx(want[tenant], abs=1e-6)


def test_active_hours_within_half_a_percent(run):
    plan, mp = run
    got = _by_tenant(mp.store.utilization.values(), lambda u: u.span_ms * (u.sm_active_ratio or 0) / H)
    for tenant, want in expected_active_hours(plan).items():
        assert got[tenant] == pytest.approx(want, rel=0.005)


def test_conservation_physical_equals_allocated_unallocated_unavailable(run):
    plan, mp = run
    hours = {}
    per_gpu_instant = {}
    for f in mp.store.capacity.values():
        hours[f.kind] = hours.get(f.kind, 0.0) + f.gpu_hours
        per_gpu_instant.setdefault(f.gpu_uuid, []).append((f.valid_from_ms, f.valid_to_ms))
    physical = len(plan.all_gpus()) * (plan.end_ms - plan.start_ms) / H
    assert hours["unavailable"] == pytest.approx(0.5, abs=1e-9)
    assert physical - hours["allocated"] - hours["unallocated"] - hours["unavailable"] == pytest.approx(0, abs=1e-9)
    for spans in per_gpu_instant.values():  # no GPU is held twice at any instant
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_reused_name_and_owner_change_attribute_by_uid_and_time(run):
    _, mp = run
    trainer = [f for f in mp.store.capacity.values() if f.pod_name == "trainer-0"]
    by_uid = {}
    for f in trainer:
        by_uid.setdefault(f.pod_uid, set()).add(f.tenant_id)
    assert sorted(map(sorted, by_uid.values())) == [["beta"], ["gamma"]]
    notebook = [f for f in mp.store.capacity.values() if f.pod_name == "notebook-0"]
    assert {f.tenant_id for f in notebook if f.valid_to_ms <= T0 + 60 * M} == {"beta"}
    assert {f.tenant_id for f in notebook if f.valid_from_ms >= T0 + 60 * M} == {"gamma"}


def test_every_sample_accounted_for(run):
    plan, mp = run
    att = mp.proc.attributors["prod-ai-1"]
    samples = att.counters
    # the last scrape of each node waits for the next to say how long it stands: 2 nodes x 4 GPUs
    assert att.pending_samples() == 8
    assert samples.samples == len({(u.device_id, u.observed_at_ms) for u in mp.store.utilization.values()}) + 8
    assert samples.samples_attributed + samples.samples_unattributed + 8 == samples.samples
    unattributed = [u for u in mp.store.utilization.values() if u.confidence == "unattributed"]
    assert all(u.reason for u in unattributed)
    # the never-allocated GPU b3 is unattributed as "device unallocated", never a tenant's
    b3 = plan.nodes["node-b"][3].uuid
    assert {u.reason for u in mp.store.utilization.values() if u.gpu_uuid == b3} == {"device unallocated"}


def test_coverage_counts_the_gap_as_unknown_not_idle(run):
    plan, mp = run
    a0 = plan.nodes["node-a"][0].uuid
    seen = {u.observed_at_ms for u in mp.store.utilization.values() if u.gpu_uuid == a0}
    assert not any(T0 + 20 * M <= t < T0 + 40 * M for t in seen)
    alpha_samples = [u for u in mp.store.utilization.values() if u.tenant_id == "alpha"]
    covered_h = sum(u.span_ms for u in alpha_samples) / H
    assert covered_h / 3.5 == pytest.approx((3.5 - 20 / 60) / 3.5, abs=1e-9)
