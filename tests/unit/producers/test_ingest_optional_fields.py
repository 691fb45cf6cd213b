"""Optional identity fields may be null or missing in vGPU snapshots and request events: the
same allocation and the same number of facts as with them, shown as empty text."""

import shutil

import pytest

from captures import optional_fields
from gpuledger.demo.cluster import write_capture
from pipeline import run_capture
from plans import service_plan


def _allocation(store) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in store.capacity.values():
        if f.kind == "allocated":
            out[f.tenant_id] = out.get(f.tenant_id, 0.0) + f.capacity_fraction * (f.valid_to_ms - f.valid_from_ms) / 3.6e6
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("optional")
    present = write_capture(service_plan(), root / "present")
    out = {}
    for how in ("null", "absent"):
        shutil.copytree(present, root / how)
        optional_fields(root / how, how)
    for how in ("present", "null", "absent"):
        mp, summary = run_capture(root / how)
        assert sum(summary.rejected.values()) == 0, summary.first_rejections
        out[how] = mp.store
    return out


def test_same_allocation_and_fact_counts_with_optional_fields_null_or_absent(runs):
    plan = service_plan()
    present = runs["present"]
    vgpu = [f for f in present.capacity.values() if f.mode == "vgpu" and f.kind == "allocated"]
    assert vgpu and len(present.requests) == len(plan.requests)
    for how in ("null", "absent"):
        store = runs[how]
        assert _allocation(store) == pytest.approx(_allocation(present), abs=1e-9)
        assert len([f for f in store.capacity.values() if f.mode == "vgpu" and f.kind == "allocated"]) == len(vgpu)
        assert len(store.requests) == len(plan.requests)
        assert {(f.project_id, f.cost_center) for f in store.capacity.values() if f.mode == "vgpu"} == {("", "")}
        assert {(f.project_id, f.model, f.revision) for f in store.requests.values()} == {("", "", "")}
        assert all(f.queue_s is None and f.ttft_s is None and f.e2e_s is None for f in store.requests.values())
    assert {f.project_id for f in present.requests.values()} == {"alpha-app", "beta-app", "gamma-app"}
    assert {f.cost_center for f in vgpu} == {"cc-alpha", "cc-beta", "cc-gamma"}
