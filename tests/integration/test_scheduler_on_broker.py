"""Acceptance (scheduler delays): pending whole-GPU pods from the watch stream as the API server
writes them (created unschedulable, PodScheduled when bound, the container's startedAt), through
the real broker, workers, sink and ClickHouse engine: each tenant's scheduling and startup
delays are exactly the hand-made truth (tests/plans.py ``SCHEDULER_TRUTH``), the SQL
percentiles (sinks/scheduler_sql.py) agree with the waits they summarize, and what the pods
held is the same as without the waits."""

from __future__ import annotations

import math
import uuid

import pytest

from conftest import Stack
from gpuledger.demo.cluster import write_capture
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.scheduler_sql import QUANTILES, delay_percentiles_sql, node_pressure_sql, open_waits_sql, waits_sql
from plans import SCHEDULER_TRUTH, H, T0, expected_allocated_hours, scheduler_plan

pytestmark = pytest.mark.integration

WINDOW = {"f": T0 - H, "t": T0 + 3 * H, "step": 60_000}


@pytest.fixture(scope="module")
def scheduled(broker, tmp_path_factory):
    base = tmp_path_factory.mktemp("scheduler")
    stack = Stack(base / "home", f"t{uuid.uuid4().hex[:10]}")
    plan = scheduler_plan()
    doc = stack.showback_of(write_capture(plan, base / "capture"), "2026-10-01T00:00:00Z", "2026-10-01T03:00:00Z")
    store = ClickHouseStore(stack.dsn)
    try:
        queries = {name: store.query(fn("gpuledger"), WINDOW) for name, fn in (
            ("waits", waits_sql), ("percentiles", delay_percentiles_sql), ("nodes", node_pressure_sql),
            ("open", open_waits_sql))}
        _, pending = store.query("SELECT pod_uid, profile, waited_from_ms, waited_to_ms FROM gpuledger.demand_facts FINAL "
                                 "WHERE outcome = 'pending' ORDER BY pod_uid, profile")
    finally:
        store.close()
    out = {name: [dict(zip(cols, r)) for r in rows] for name, (cols, rows) in queries.items()}
    return plan, doc, {**out, "pending": [tuple(r) for r in pending]}


def _s(a, b):
    return None if a is None or b is None else (b - a) / 1000


def test_each_tenants_scheduling_and_startup_delays_are_exact(scheduled):
    _, _, q = scheduled
    got: dict[str, list] = {}
    for w in q["waits"]:
        got.setdefault(w["tenant_id"], []).append((w["pod_name"], w["outcome"], _s(w["created_ms"], w["scheduled_ms"]),
                                                   _s(w["scheduled_ms"], w["running_ms"]),
                                                   _s(w["created_ms"], w["waited_to_ms"])))
    assert {t: sorted(v) for t, v in got.items()} == {t: sorted(v) for t, v in SCHEDULER_TRUTH.items()}
    by_pod = {(w["tenant_id"], w["pod_name"]): w for w in q["waits"]}
    assert (by_pod["alpha", "eval-0"]["gpu_class"], by_pod["alpha", "eval-0"]["node"]) == ("H100-80GB", "node-a")
    assert (by_pod["alpha", "eval-0"]["priority_class"], by_pod["alpha", "eval-0"]["priority"]) == ("batch-low", 100)
    assert (by_pod["alpha", "big-8"]["instances"], by_pod["alpha", "big-8"]["gpu_class"]) == (8, "")  # never bound
    assert by_pod["beta", "notebook-0"]["priority_class"] == "interactive"


def _quantile(values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (R type 7)."""
    xs = sorted(values)
    h = (len(xs) - 1) * p
    lo = math.floor(h)
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


def test_the_sql_percentiles_are_those_of_the_waits(scheduled):
    _, _, q = scheduled
    groups: dict[tuple, list] = {}
    for w in q["waits"]:
        groups.setdefault((w["tenant_id"], w["gpu_class"], w["profile"], w["priority_class"]), []).append(w)
    assert {(r["tenant_id"], r["gpu_class"], r["profile"], r["priority_class"]) for r in q["percentiles"]} == set(groups)
    for r in q["percentiles"]:
        waits = groups[r["tenant_id"], r["gpu_class"], r["profile"], r["priority_class"]]
        assert r["waits"] == len(waits) and r["never_bound"] == sum(w["scheduled_ms"] is None for w in waits)
        for column, (a, b) in {"scheduling_delay_s": ("created_ms", "scheduled_ms"),
                               "startup_delay_s": ("scheduled_ms", "running_ms"),
                               "pending_s": ("created_ms", "waited_to_ms")}.items():
            values = [_s(w[a], w[b]) for w in waits if _s(w[a], w[b]) is not None]
            if values:
                assert r[column] == pytest.approx([_quantile(values, p) for p in QUANTILES], abs=1e-9), (r, column)
            else:
                assert all(math.isnan(v) for v in r[column])


def test_the_node_ranking_sees_the_waits_bound_to_each_node(scheduled):
    _, _, q = scheduled
    nodes = {r["node"]: r for r in q["nodes"]}
    assert set(nodes) == {"node-a", "node-b"}
    # alpha's two pods and beta's and gamma's four (stuck-0 too) waited on their nodes
    assert (nodes["node-a"]["pods_bound"], nodes["node-b"]["pods_bound"]) == (2, 4)
    assert nodes["node-b"]["pending_pod_hours"] == pytest.approx(round((300 + 480 + 240 + 1200) / 3600, 3), abs=1e-9)
    assert all(r["free_while_pods_waited_gpu_hours"] > 0 for r in q["nodes"])  # big-8 waited an hour, GPUs were free


def test_each_wait_was_pending_first_and_its_wait_replaces_it(scheduled):
    """Every wait has its pending fact (from its creation, no end) through the broker and the
    sink; every wait here ended, so none is still pending and each lasts as its wait did."""
    _, _, q = scheduled
    assert q["pending"] == sorted((w["pod_uid"], w["profile"], w["created_ms"], w["created_ms"]) for w in q["waits"])
    assert sorted((o["pod_uid"], o["created_ms"], o["until_ms"], o["still_pending"]) for o in q["open"]) == sorted(
        (w["pod_uid"], w["created_ms"], w["waited_to_ms"], False) for w in q["waits"])


def test_waiting_does_not_change_what_pods_held(scheduled):
    plan, doc, _ = scheduled
    got = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    want = expected_allocated_hours(plan)
    assert got.keys() == want.keys()
    for tenant, hours in want.items():
        assert got[tenant] == pytest.approx(hours, abs=1e-6)
