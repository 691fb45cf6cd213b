"""vGPU (two VMs, one re-assigned to another owner) and a shared endpoint (three tenants
with different token mixes) through the real broker, the workers, the sink and ClickHouse."""

import statistics
from decimal import ROUND_HALF_UP, Decimal

import pytest

from gpuledger.demo.cluster import write_capture
from plans import SERVICE_SHARE_HOURS, SERVICE_UNITS, SERVICE_VGPU_TRUTH, service_plan

pytestmark = pytest.mark.integration


@pytest.fixture
def showback(stack, tmp_path):
    plan = service_plan()
    capture = write_capture(plan, tmp_path / "capture")
    return plan, stack.showback_of(capture, "2026-10-01T00:00:00Z", "2026-10-01T03:00:00Z")


def test_vgpu_and_endpoint_shares(showback):
    plan, doc = showback
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    for tenant, hours in SERVICE_VGPU_TRUTH.items():
        assert tenants[tenant]["allocated_by_mode"]["vgpu"] == pytest.approx(hours, abs=1e-6)
    assert doc["ratecard_version"] == "2026-10-v1"
    (ep,) = doc["endpoints"]
    assert (ep["endpoint_id"], ep["owner_tenant_id"]) == ("chat-llm", "ml-platform")
    assert ep["allocated_gpu_hours"] == pytest.approx(6.0, abs=1e-9)
    shares = {s["tenant_id"]: s for s in ep["shares"]}
    assert {t: s["weighted_units"] for t, s in shares.items()} == SERVICE_UNITS  # failed requests carry no share
    for tenant, hours in SERVICE_SHARE_HOURS.items():
        assert shares[tenant]["gpu_hours"] == pytest.approx(hours, abs=1e-6)
        assert tenants[tenant]["service_share_gpu_hours"] == pytest.approx(hours, abs=1e-6)
    assert sum(s["micro_gpu_hours"] for s in ep["shares"]) == ep["allocated_micro_gpu_hours"]  # exact, no unit lost
    assert tenants["ml-platform"]["endpoint_recovered_gpu_hours"] == pytest.approx(6.0, abs=1e-6)
    assert tenants["ml-platform"]["allocated_gpu_hours"] == pytest.approx(6.0, abs=1e-6)


def test_productive_work_and_latency_quantiles(showback):
    plan, doc = showback
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    assert (tenants["gamma"]["requests"], tenants["gamma"]["successful_requests"]) == (40, 30)
    assert tenants["alpha"]["input_tokens"] == 100 * 1000 and tenants["beta"]["output_tokens"] == 50 * 800
    work = {w["tenant_id"]: w for w in doc["productive_work"]}
    alpha_ttft = sorted(r["ttft_s"] for r in plan.requests if r["tenant_id"] == "alpha")
    assert work["alpha"]["model"] == "llama-3.1-70b"
    assert work["alpha"]["ttft_s"]["p50"] == pytest.approx(statistics.quantiles(alpha_ttft, n=100, method="inclusive")[49],
                                                           abs=0.011)
    assert work["alpha"]["ttft_s"]["p99"] == pytest.approx(max(alpha_ttft), abs=0.011)
    assert work["alpha"]["e2e_s"]["p95"] >= work["alpha"]["e2e_s"]["p50"]


def test_costs_from_the_rate_card(showback):
    _, doc = showback
    assert doc["currency"] == "USD"
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    (ep,) = doc["endpoints"]
    # no quotas: all borrowed at 4.00/h; 2 GPUs x 3 h = 6 GPU-hours = 24.00, split 13:13:6 by weighted tokens
    assert ep["cost"] == 24.00
    assert {s["tenant_id"]: s["cost"] for s in ep["shares"]} == {"alpha": 9.75, "beta": 9.75, "gamma": 4.50}
    owner = tenants["ml-platform"]["cost"]
    assert (owner["borrowed"], owner["endpoint_recovered"], owner["total"]) == (24.00, 24.00, 0.00)
    # successful requests only: alpha 100k in + 10k out, beta 10k + 40k, gamma 15k + 15k; 0.50 / 1.50 per million
    assert tenants["alpha"]["cost"]["variable"] == 0.07  # 0.065, rounded only when shown
    assert tenants["gamma"]["cost"]["variable"] == 0.03
    assert tenants["beta"]["cost"]["total"] == pytest.approx(9.75 + 0.07, abs=0.01)
    # the A100 vGPU hours are not priced by this card: reported, not dropped
    assert doc["platform"]["unpriced_gpu_hours"] == {"A100-40GB": pytest.approx(1.5 + 0.15 + 0.1, abs=1e-9)}


def test_cost_per_outcome(showback):
    """The endpoint's 24.00 over its successful requests and output tokens, by hand; each
    tenant's total charge over its own."""
    _, doc = showback
    work = doc["productive_work"]
    ok, out = sum(w["successful_requests"] for w in work), sum(w["output_tokens"] for w in work)
    assert ok == 100 + 50 + 30  # gamma's 10 errors produce nothing
    outcome = doc["cost_per_outcome"]
    (ep,) = outcome["endpoints"]
    assert (ep["endpoint_id"], ep["cost"], ep["successful_requests"], ep["output_tokens"]) == ("chat-llm", 24.0, ok, out)
    assert ep["per_successful_request"] == 0.133333  # 24.00 / 180 = 0.1333...
    assert ep["per_million_output_tokens"] == float(
        (Decimal("24.00") * 1_000_000 / out).quantize(Decimal("0.000001"), ROUND_HALF_UP))
    (model,) = outcome["models"]
    assert model["model"] == "llama-3.1-70b" and model["cost"] == 24.0 and model["successful_requests"] == ok
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    for t in outcome["tenants"]:
        charged = Decimal(str(tenants[t["tenant_id"]]["cost"]["total"]))
        assert t["cost"] == float(charged)
        if t["successful_requests"]:
            assert t["per_successful_request"] == float(
                (charged / t["successful_requests"]).quantize(Decimal("0.000001"), ROUND_HALF_UP))
    assert {t["tenant_id"]: t["successful_requests"] for t in outcome["tenants"]}["gamma"] == 30
