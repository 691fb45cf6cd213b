"""MIG (two profiles, a re-partition mid-run) and time-slicing (4 replicas, two tenants)
through the real broker, the workers, the sink and the ClickHouse engine."""

import pytest

from gpuledger.demo.cluster import write_capture
from plans import SHARING_PROFILE_HOURS, SHARING_TRUTH, expected_sharing_active_hours, sharing_plan

pytestmark = pytest.mark.integration


@pytest.fixture
def showback(stack, tmp_path):
    plan = sharing_plan()
    capture = write_capture(plan, tmp_path / "capture")
    return plan, stack.showback_of(capture, "2026-10-01T00:00:00Z", "2026-10-01T03:00:00Z")


def test_mig_and_timeslice_hours_shares_and_conservation(showback):
    plan, doc = showback
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    for (tenant, mode), hours in SHARING_TRUTH.items():
        assert tenants[tenant]["allocated_by_mode"][mode] == pytest.approx(hours, abs=1e-6)
    for (tenant, profile), hours in SHARING_PROFILE_HOURS.items():
        assert tenants[tenant]["mig_profile_hours"][profile] == pytest.approx(hours, abs=1e-6)
    assert tenants["alpha"]["confidence_gpu_hours"]["modeled"] == pytest.approx(0.5, abs=1e-6)
    assert tenants["alpha"]["confidence_gpu_hours"]["high"] == pytest.approx(3 / 7, abs=1e-6)
    for tenant, hours in expected_sharing_active_hours(plan).items():
        assert tenants[tenant]["active_gpu_hours"] == pytest.approx(hours, rel=0.005)
    p = doc["platform"]
    assert p["physical_gpu_hours"] == pytest.approx(6.0, abs=1e-9)  # two physical GPUs, never more
    assert p["physical_gpu_hours"] == pytest.approx(p["allocated_gpu_hours"] + p["unallocated_gpu_hours"], abs=1e-9)
    assert p["difference_gpu_hours"] == 0 and p["over_allocated_gpu_hours"] == 0


def test_fragmentation_free_mig_capacity_by_profile(showback):
    _, doc = showback
    (frag,) = doc["fragmentation"]
    assert frag["gpu_class"] == "H100-80GB"
    assert frag["free_instance_hours"] == pytest.approx({"1g.10gb": 1.5, "3g.40gb": 2.5, "4g.40gb": 40 / 60}, abs=1e-6)
    assert frag["free_gpu_equivalent_hours"] == pytest.approx(1.5 / 7 + 2.5 * 3 / 7 + 40 / 60 * 4 / 7, abs=1e-6)
    assert frag["unpartitioned_gpu_hours"] == 0
    (wait,) = frag["could_not_host"]  # wants-4g waited 20..80 min while layout A had no 4g.40gb free
    assert (wait["profile"], wait["waits"]) == ("4g.40gb", 1)
    assert wait["pod_hours_waited"] == pytest.approx(1.0, abs=1e-9)
    # free meanwhile: 1g.10gb (1/7) for 60 min, 3g.40gb (3/7) for 10 + 20 min
    assert wait["free_gpu_equivalent_hours_meanwhile"] == pytest.approx(1 / 7 + 0.5 * 3 / 7, abs=1e-6)
