"""Generated clusters scraped every 5, 15, 30 and 60 s, PodResources polled on a clock and at
an interval of its own, each with no jitter, ±20 % jitter, and ±20 % jitter with 1 % of
samples lost: allocation exact to 1e-6 h, active GPU-hours within 0.5 %, coverage within 1 %,
per tenant, against the truth the plan alone gives (``demo/varied.py``).

A fixed span per sample would fail every cell but the 10-s one: a 30-s scrape standing for
10 s covers a third of the time."""

import pytest

from gpuledger.demo.varied import H, VariedTruth, varied_plan, write_varied
from pipeline import run_capture

DCGM_PR_S = [(5, 15), (15, 40), (30, 20), (60, 45)]
VARIANTS = {"regular": (0.0, 0.0), "jitter": (0.2, 0.0), "jitter+missing": (0.2, 0.01)}


def _measured(mp) -> tuple[dict, dict, dict]:
    alloc, active, covered = {}, {}, {}
    for f in mp.store.capacity.values():
        if f.kind == "allocated" and f.tenant_id:
            alloc[f.tenant_id] = alloc.get(f.tenant_id, 0.0) + f.gpu_hours
    for u in mp.store.utilization.values():
        if u.tenant_id:
            active[u.tenant_id] = active.get(u.tenant_id, 0.0) + u.span_ms * (u.sm_active_ratio or 0) / H
            covered[u.tenant_id] = covered.get(u.tenant_id, 0.0) + u.span_ms / H
    return alloc, active, covered


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("dcgm_s", "pr_s"), DCGM_PR_S)
def test_cadence_cell_matches_the_truth(tmp_path, dcgm_s, pr_s, variant):
    jitter, missing = VARIANTS[variant]
    plan = varied_plan(dcgm_s, pr_s, jitter, missing, hours=8, seed=dcgm_s * 100 + pr_s)
    if missing:
        expected = sum(len(v) for v in plan.dcgm_times.values())
        full = 2 * 8 * 3600 // dcgm_s
        assert expected < full, "some scrapes are lost in this cell"
    mp, summary = run_capture(write_varied(plan, tmp_path / "cap"))
    assert not mp.dead and not summary.rejected
    truth = VariedTruth.of(plan)
    alloc, active, covered = _measured(mp)
    assert sorted(alloc) == sorted(truth.allocated_h) == plan.tenants and len(plan.tenants) >= 3
    for tenant in plan.tenants:
        assert alloc[tenant] == pytest.approx(truth.allocated_h[tenant], abs=1e-6), tenant
        assert active[tenant] == pytest.approx(truth.active_h[tenant], rel=0.005), tenant
        assert covered[tenant] / alloc[tenant] == pytest.approx(1.0, abs=0.01), tenant
    # what samples cover of a capacity fact never exceeds the fact: no time is counted twice
    spans = {}
    for u in mp.store.utilization.values():
        if u.capacity_fact_id:
            spans[u.capacity_fact_id] = spans.get(u.capacity_fact_id, 0) + u.span_ms
    assert spans
    for fid, span in spans.items():
        f = mp.store.capacity[fid]
        assert span <= f.valid_to_ms - f.valid_from_ms, f
