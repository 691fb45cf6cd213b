"""Acceptance: a hand-made capture with known truth, through the real broker, the worker, the sink
and the ClickHouse engine, read back by `gpuledger showback --format json`."""

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from plans import QUOTA_TRUTH, expected_active_hours, expected_allocated_hours, truth_plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def showback(broker, tmp_path_factory):
    from conftest import Stack  # noqa: PLC0415 — same module-level helper as the function fixture

    import uuid

    base = tmp_path_factory.mktemp("truth")
    stack = Stack(base / "home", f"t{uuid.uuid4().hex[:10]}")
    plan = truth_plan()
    cap = write_capture(plan, base / "capture")
    stack.run("ingest", str(cap))
    stack.run("process", "--until-caught-up")
    out = stack.run("showback", "--from", "2026-10-01T00:00:00Z", "--to", "2026-10-01T03:00:00Z", "--format", "json")
    return plan, orjson.loads(out.stdout), stack


def test_allocated_gpu_hours_exact(showback):
    plan, doc, _ = showback
    got = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    want = expected_allocated_hours(plan)
    assert got.keys() == want.keys()
    for tenant, hours in want.items():
        assert got[tenant] == pytest.approx(hours, abs=1e-6)
        assert got[tenant] == pytest.approx(
            next(t for t in doc["tenants"] if t["tenant_id"] == tenant)["allocated_by_mode"]["exclusive"], abs=1e-9)


def test_active_gpu_hours_within_half_a_percent(showback):
    plan, doc, _ = showback
    got = {t["tenant_id"]: t["active_gpu_hours"] for t in doc["tenants"]}
    for tenant, hours in expected_active_hours(plan).items():
        assert got[tenant] == pytest.approx(hours, rel=0.005)


def test_coverage(showback):
    _, doc, _ = showback
    cov = {t["tenant_id"]: t["telemetry_coverage"] for t in doc["tenants"]}
    assert cov["alpha"] == pytest.approx((3.5 - 20 / 60) / 3.5, abs=1e-9)  # GPU a0 dark for 20 min
    assert cov["beta"] == pytest.approx(1.0) and cov["gamma"] == pytest.approx(1.0)
    alpha = next(t for t in doc["tenants"] if t["tenant_id"] == "alpha")
    assert alpha["idle_allocated_gpu_hours"] == pytest.approx(alpha["covered_gpu_hours"] - alpha["active_gpu_hours"])


def test_platform_conservation(showback):
    _, doc, _ = showback
    p = doc["platform"]
    assert p["physical_gpu_hours"] == pytest.approx(8 * 3, abs=1e-9)
    assert p["unavailable_gpu_hours"] == pytest.approx(0.5, abs=1e-9)
    assert p["allocated_gpu_hours"] == pytest.approx(3.5 + (0.5 + 50 / 60) + 2.5, abs=1e-6)
    assert p["physical_gpu_hours"] == pytest.approx(
        p["allocated_gpu_hours"] + p["unallocated_gpu_hours"] + p["unavailable_gpu_hours"], abs=1e-9)
    assert p["difference_gpu_hours"] == 0
    assert p["unattributed_gpu_hours"] == 0


def test_reused_pod_name_and_owner_change_by_uid_and_time(showback):
    _, _, stack = showback
    facts = stack.facts()["capacity_facts"]
    # columns: see sinks/schema_sql.py CAPACITY_COLUMNS order + materialized columns excluded by SELECT *
    from gpuledger.sinks.schema_sql import CAPACITY_COLUMNS

    rows = [dict(zip(CAPACITY_COLUMNS, r)) for r in facts]
    trainer = {}
    for r in rows:
        if r["pod_name"] == "trainer-0":
            trainer.setdefault(r["pod_uid"], set()).add(r["tenant_id"])
    assert sorted(map(sorted, trainer.values())) == [["beta"], ["gamma"]]


def test_csv_and_table_formats(showback):
    _, doc, stack = showback
    csv = stack.run("showback", "--from", "2026-10-01T00:00:00Z", "--to", "2026-10-01T03:00:00Z", "--format", "csv").stdout
    lines = csv.strip().splitlines()
    assert lines[0].startswith("tenant,allocated_h")
    assert len(lines) == 1 + len(doc["tenants"])
    table = stack.run("showback", "--period", "2026-10").stdout
    assert "alpha" in table and "physical 24.000" in table


def test_guaranteed_and_borrowed_by_quota(showback):
    _, doc, _ = showback
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    for tenant, (guaranteed, borrowed) in QUOTA_TRUTH.items():
        assert tenants[tenant]["guaranteed_gpu_hours"] == pytest.approx(guaranteed, abs=1e-6)
        assert tenants[tenant]["borrowed_gpu_hours"] == pytest.approx(borrowed, abs=1e-6)
        assert guaranteed + borrowed == pytest.approx(tenants[tenant]["allocated_gpu_hours"], abs=1e-6)


def test_borrowing_against_the_borrow_limit(showback):
    """alpha (quota 1, borrow limit 2) borrows 1 GPU 0..30 min and 2 GPUs 30..60 min: its peak
    is the limit, never over it; gamma's quota sets no limit."""
    _, doc, _ = showback
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    assert tenants["alpha"]["borrow_limits"] == {
        "H100-80GB": {"borrow_limit_gpus": 2.0, "peak_borrowed_gpus": 2.0, "gpu_hours_over_limit": 0.0}}
    assert tenants["gamma"]["borrow_limits"] is None and tenants["beta"]["borrow_limits"] is None


def test_held_intervals_carry_their_telemetry_coverage(showback):
    """What the telemetry-unknown billing policy sets aside (domain/pricing.py): per held
    interval, the share its telemetry did not cover; summed, a0's 20 dark minutes under alpha."""
    from gpuledger.sinks.clickhouse import ClickHouseStore  # noqa: PLC0415
    from gpuledger.sinks.coverage_sql import held_intervals_sql  # noqa: PLC0415
    from gpuledger.domain.timeutil import parse_rfc3339_ms  # noqa: PLC0415

    _, doc, stack = showback
    f, t = parse_rfc3339_ms("2026-10-01T00:00:00Z"), parse_rfc3339_ms("2026-10-01T03:00:00Z")
    store = ClickHouseStore(stack.dsn)
    try:
        rows = store.query(held_intervals_sql("gpuledger"), {"f": f, "t": t})[1]
    finally:
        store.close()
    unknown: dict[str, float] = {}
    for tenant, _, _, a, b, fraction, _, _, covered, _device in rows:
        unknown[tenant] = unknown.get(tenant, 0.0) + fraction * (min(b, t) - max(a, f)) * (1 - covered) / 3_600_000
    assert unknown["alpha"] == pytest.approx(20 / 60, abs=1e-6)
    assert sum(unknown.values()) == pytest.approx(doc["platform"]["idle_gpu_hours"]["telemetry_unknown"], abs=1e-6)


def test_idle_classes_account_for_all_capacity(showback):
    _, doc, _ = showback
    p, idle = doc["platform"], doc["platform"]["idle_gpu_hours"]
    active = sum(t["active_gpu_hours"] for t in doc["tenants"])
    assert p["physical_gpu_hours"] == pytest.approx(active + sum(idle.values()) + p["difference_gpu_hours"], abs=1e-6)
    assert idle["reliability_reserve"] == pytest.approx(0.5, abs=1e-9)  # b2's maintenance window
    assert idle["telemetry_unknown"] == pytest.approx(20 / 60, abs=1e-6)  # a0 dark for 20 min under alpha
    assert idle["fragmentation"] == 0  # no MIG here
