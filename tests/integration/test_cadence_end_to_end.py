"""Acceptance (observed cadence), end to end on the real broker and engine: generated clusters
scraped every 30 s and every 60 s, with ±20 % jitter and 1 % of samples lost, PodResources on
a clock and at an interval of their own, go through ``ingest``, ``process`` and ``showback``:
allocation exact to 1e-6 h, active GPU-hours within 0.5 %, coverage within 1 %, per tenant."""

import orjson
import pytest

from gpuledger.demo.varied import VariedTruth, varied_plan, write_varied

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("dcgm_s", "pr_s"), [(30, 20), (60, 45)])
def test_showback_matches_the_truth_at_any_cadence(stack, tmp_path, dcgm_s, pr_s):
    plan = varied_plan(dcgm_s, pr_s, jitter=0.2, missing=0.01, hours=8, seed=dcgm_s)
    truth = VariedTruth.of(plan)
    stack.run("ingest", str(write_varied(plan, tmp_path / "capture")))
    stack.run("process", "--until-caught-up")
    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    tenants = {e["tenant_id"]: e for e in doc["tenants"]}
    assert sorted(tenants) == plan.tenants and len(tenants) >= 3
    for tenant, e in tenants.items():
        assert e["allocated_gpu_hours"] == pytest.approx(truth.allocated_h[tenant], abs=1e-6), tenant
        assert e["active_gpu_hours"] == pytest.approx(truth.active_h[tenant], rel=0.005), tenant
        assert e["telemetry_coverage"] == pytest.approx(1.0, abs=0.01), tenant
