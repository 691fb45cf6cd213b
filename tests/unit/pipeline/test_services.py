"""vGPU owners and a shared model endpoint on the in-memory twins."""

import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.domain.showback import build_showback
from pipeline import run_capture
from plans import H, M, SERVICE_VGPU_TRUTH, T0, service_plan


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    plan = service_plan()
    mp, summary = run_capture(write_capture(plan, tmp_path_factory.mktemp("cap")))
    assert sum(summary.rejected.values()) == 0
    return plan, mp


def test_vgpu_hours_by_owner_and_reassignment(run):
    _, mp = run
    got = {}
    for f in mp.store.capacity.values():
        if f.kind == "allocated" and f.mode == "vgpu":
            got[f.tenant_id] = got.get(f.tenant_id, 0.0) + f.gpu_hours
            assert f.workload_kind == "vm" and f.confidence == "high"
    assert got == pytest.approx(SERVICE_VGPU_TRUTH, abs=1e-9)
    vm2 = {f.tenant_id for f in mp.store.capacity.values() if f.pod_name == "vm-2" and f.valid_from_ms >= T0 + 90 * M}
    assert vm2 == {"gamma"}


def test_vgpu_host_conserves_its_gpu(run):
    plan, mp = run
    a100 = plan.vgpu_gpus[0].uuid
    hours = sum(f.gpu_hours for f in mp.store.capacity.values() if f.gpu_uuid == a100 and f.kind != "over_allocated")
    assert hours == pytest.approx(3.0, abs=1e-9)


def test_guest_telemetry_is_the_vms_and_host_series_is_never_added(run):
    plan, mp = run
    a100 = plan.vgpu_gpus[0].uuid
    guest = [u for u in mp.store.utilization.values() if u.device_id != a100 and u.gpu_uuid.startswith("GPU-")
             and u.tenant_id in ("alpha", "beta", "gamma")]
    by_tenant = {}
    for u in guest:
        by_tenant[u.tenant_id] = by_tenant.get(u.tenant_id, 0) + u.span_ms / H
    # full coverage per VM, but for vm-1's last scrape: it runs to the end of the capture, so no
    # next scrape (nor a watermark past its staleness limit) says yet how long that one stands for
    last = plan.scrape_every_ms / H
    assert by_tenant == pytest.approx({"alpha": 3.0 - last, "beta": 1.5, "gamma": 1.0}, abs=1e-9)
    assert mp.proc.attributors[plan.cluster_id].guest_pending, "vm-1's last scrape waits"
    host = {u.reason for u in mp.store.utilization.values() if u.device_id == a100}
    assert host == {"vGPU host GPU: attributed through vGPU assignments"}


def test_request_facts_kept_whole(run):
    _, mp = run
    reqs = list(mp.store.requests.values())
    assert len(reqs) == 100 + 50 + 40
    assert sum(r.outcome == "error" for r in reqs) == 10
    assert all(r.ttft_s is not None and r.e2e_s is not None for r in reqs)


def test_endpoint_pod_carries_its_endpoint(run):
    _, mp = run
    serving = [f for f in mp.store.capacity.values() if f.pod_name == "chat-llm-0"]
    assert {f.endpoint_id for f in serving} == {"chat-llm"}
    assert sum(f.gpu_hours for f in serving) == pytest.approx(6.0, abs=1e-9)


def test_largest_remainder_shares_sum_exactly():
    from fractions import Fraction

    from gpuledger.domain.endpoints import largest_remainder

    parts = largest_remainder(10, {"a": Fraction(1), "b": Fraction(1), "c": Fraction(1)})
    assert parts == {"a": 4, "b": 3, "c": 3}
    parts = largest_remainder(1_000_001, {"x": Fraction(2, 3), "y": Fraction(1, 3), "z": Fraction(0)})
    assert sum(parts.values()) == 1_000_001 and parts["z"] == 0


def test_showback_endpoint_block_from_rows():
    rows = {"from_ms": T0, "to_ms": T0 + 3 * H, "as_of_ms": T0 + 3 * H, "tenant_capacity": [], "tenant_utilization": [],
            "platform_capacity": [], "physical": [(0.0,)], "unattributed_samples": [],
            "endpoint_capacity": [("chat-llm", "ml-platform", "platform-ns", 1.0)],
            "endpoints": ['[{"endpoint_id": "chat-llm", "owner_tenant_id": "ml-platform", "namespaces": ["platform-ns"], '
                          '"valid_from": "2026-10-01T00:00:00Z"}]'],
            "endpoint_usage": [("chat-llm", "a", 1, 1, 1, 0), ("chat-llm", "b", 1, 1, 1, 0), ("chat-llm", "c", 1, 1, 1, 0)],
            "productive_work": [], "ratecards": []}
    doc = build_showback(rows)
    (ep,) = doc["endpoints"]
    assert sum(s["micro_gpu_hours"] for s in ep["shares"]) == ep["allocated_micro_gpu_hours"] == 1_000_000
    assert ep["recovered_gpu_hours"] == pytest.approx(1.0)
    assert {t["tenant_id"]: t["service_share_gpu_hours"] for t in doc["tenants"]}["a"] == pytest.approx(0.333334)
