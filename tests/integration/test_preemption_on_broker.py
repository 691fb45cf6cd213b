"""Acceptance (preemption): pods the cluster preempted or evicted, from the watch stream as the
API server writes them (DisruptionTarget condition, Failed, deleted), through the real broker,
workers, sink and ClickHouse engine: the showback's reclaimed GPU-hours per tenant equal the
hand-computed truth (tests/plans.py ``PREEMPTION_TRUTH``), guaranteed and borrowed split by
the same quota sweep as the bill, and allocation is the same as without the disruptions. The
scheduler dashboard's preemption queries (sinks/preemption_sql.py) give the same GPU-hours,
held and borrowed, per pod, tenant and GPU class."""

from __future__ import annotations

import uuid

import pytest

from conftest import Stack
from gpuledger.demo.cluster import write_capture
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.preemption_sql import reclaimed_by_tenant_sql, reclaimed_pods_sql
from plans import PREEMPTION_TRUTH, H, M, T0, expected_allocated_hours, preemption_plan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def showback(broker, tmp_path_factory):
    base = tmp_path_factory.mktemp("preemption")
    stack = Stack(base / "home", f"t{uuid.uuid4().hex[:10]}")
    plan = preemption_plan()
    doc = stack.showback_of(write_capture(plan, base / "capture"), "2026-10-01T00:00:00Z", "2026-10-01T03:00:00Z")
    return plan, doc, stack


def test_reclaimed_gpu_hours_per_tenant_are_exact(showback):
    _, doc, _ = showback
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    for tenant, (outcome, gpu_hours, borrowed) in PREEMPTION_TRUTH.items():
        block = tenants[tenant]["reclaimed"]
        assert block[f"{outcome}_gpu_hours"] == pytest.approx(gpu_hours, abs=1e-9), (tenant, block)
        assert block[f"{outcome}_borrowed_gpu_hours"] == pytest.approx(borrowed, abs=1e-9), (tenant, block)
        assert block[f"pods_{outcome}"] == 1
        other = "evicted" if outcome == "preempted" else "preempted"
        assert block[f"{other}_gpu_hours"] == 0 and block[f"pods_{other}"] == 0
        assert block["by_class"]["H100-80GB"][outcome]["borrowed_gpu_hours"] == pytest.approx(borrowed, abs=1e-9)
    assert tenants["gamma"]["reclaimed"] is None  # its pods ended by themselves


def test_disruptions_do_not_change_allocation(showback):
    plan, doc, _ = showback
    got = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    want = expected_allocated_hours(plan)
    assert got.keys() == want.keys()
    for tenant, hours in want.items():
        assert got[tenant] == pytest.approx(hours, abs=1e-6)


def test_the_demand_facts_name_each_disruption_once(showback):
    """One fact per disrupted pod, over its life, counted before FINAL (no row written twice
    here), and the MIG-wait queries do not take them for waits."""
    _, doc, stack = showback
    store = ClickHouseStore(stack.dsn)
    try:
        _, rows = store.query("SELECT tenant_id, pod_name, profile, instances, outcome, waited_from_ms, waited_to_ms "
                              "FROM gpuledger.demand_facts WHERE outcome IN ('preempted', 'evicted') ORDER BY tenant_id")
    finally:
        store.close()
    assert [tuple(r) for r in rows] == [
        ("alpha", "train-0", "", 2, "preempted", T0 - 5_000, T0 + 60 * M),
        ("beta", "trainer-0", "", 1, "evicted", T0 + 10 * M - 5_000, T0 + 60 * M)]


def test_the_dashboard_queries_split_the_reclaimed_hours_as_the_showback_does(showback):
    _, _, stack = showback
    store = ClickHouseStore(stack.dsn)
    try:
        window = {"f": T0, "t": T0 + 3 * H}
        pods = [dict(zip(cols, r)) for cols, rows in [store.query(reclaimed_pods_sql("gpuledger"), window)]
                for r in rows]
        _, by_tenant = store.query(reclaimed_by_tenant_sql("gpuledger"), window)
        _, only_beta = store.query(reclaimed_by_tenant_sql("gpuledger", "tenant_id = 'beta'"), window)
    finally:
        store.close()
    assert [(p["tenant_id"], p["pod_name"], p["outcome"], p["gpu_class"], p["asked"], p["gpu_hours_held"],
             p["borrowed_gpu_hours"]) for p in pods] == [
        ("alpha", "train-0", "preempted", "H100-80GB", "2 GPU", 2.0, round(0.5 + 2 / 3, 3)),
        ("beta", "trainer-0", "evicted", "H100-80GB", "1 GPU", round(50 / 60, 3), round(50 / 60, 3))]
    want = sorted(((tenant, "H100-80GB", outcome, 1, round(held, 3), round(borrowed, 3))
                   for tenant, (outcome, held, borrowed) in PREEMPTION_TRUTH.items()), key=lambda r: -r[5])
    assert [tuple(r) for r in by_tenant] == want
    assert [tuple(r) for r in only_beta] == [w for w in want if w[0] == "beta"]
