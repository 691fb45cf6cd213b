"""Scheduler-pressure queries on the embedded engine (chdb), on facts written with a known
answer: the idlest workloads (sinks/scheduler_sql.py ``idle_workloads_sql``, the scheduler
dashboard's "Top idle workloads" panel), the pods pending by age, those still pending too
(``pending_by_age_sql``), and the hourly unmet demand the forecast reads per GPU class
(sinks/forecast_sql.py ``unmet_hourly_sql``)."""

from __future__ import annotations

import datetime as dt

import pytest

from gpuledger.domain.demand import DemandFact
from gpuledger.domain.facts import CapacityFact, FactBatch, UtilizationFact
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.forecast_sql import UNKNOWN_CLASS, read_forecast_inputs
from gpuledger.sinks.scheduler_sql import idle_workloads_sql, open_waits_sql, pending_by_age_sql

pytestmark = pytest.mark.integration

H, M = 3_600_000, 60_000
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")
HALF_HOUR = 30 * M
OWNERS = {"alpha": ("alpha-ns", "p-alpha", "cc-alpha"), "beta": ("beta-ns", "p-beta", "cc-beta"),
          "gamma": ("gamma-ns", "p-gamma", "cc-gamma")}


@pytest.fixture()
def store(tmp_path):
    s = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}")
    s.ensure_schema()
    s.insert("inventory_gpus", [["c1", f"GPU-{node}-{i}", node, cls, cls, mode, T0 - 24 * H, None, T0 - 24 * H]
                                for node, cls, mode in (("n1", "H100-80GB", "exclusive"), ("n2", "H100-80GB", "exclusive"),
                                                        ("m1", "A100-80GB", "mig")) for i in range(2)],
             ["cluster_id", "gpu_uuid", "node", "model", "gpu_class", "mode", "valid_from_ms", "valid_to_ms",
              "document_ms"])
    yield s
    s.close()


def _held(fact_id: str, tenant: str, pod: str, node: str, gpu: int, a: int, b: int, **kw) -> CapacityFact:
    ns, project, cost_center = OWNERS.get(tenant, ("", "", ""))
    return CapacityFact(**{
        "fact_id": fact_id, "cluster_id": "c1", "kind": "allocated", "gpu_uuid": f"GPU-{node}-{gpu}",
        "device_id": f"GPU-{node}-{gpu}", "node": node, "gpu_class": "H100-80GB", "mode": "exclusive", "profile": "",
        "capacity_fraction": 1.0, "valid_from_ms": a, "valid_to_ms": b, "tenant_id": tenant, "project_id": project,
        "cost_center": cost_center, "namespace": ns, "namespace_uid": f"{ns}-uid", "pod_name": pod,
        "pod_uid": f"uid-{pod}", "container": "main", "endpoint_id": "", "workload_kind": "pod", "confidence": "high",
        "reason": "", "src_topic": "t", "src_partition": 0, "src_offset": 0, **kw})


def _samples(cap: CapacityFact, sm: list[float]) -> list[UtilizationFact]:
    """One sample per half hour from the fact's start, each standing for its half hour."""
    return [UtilizationFact(f"{cap.fact_id}-s{k}", "c1", cap.gpu_uuid, cap.device_id, cap.node,
                            cap.valid_from_ms + k * HALF_HOUR, HALF_HOUR, ratio, None, None, None, cap.fact_id,
                            "allocated", cap.tenant_id, cap.project_id, cap.namespace, cap.pod_name, cap.pod_uid,
                            "high", "", "t", 0, k) for k, ratio in enumerate(sm)]


def _wait(pod: str, profile: str, instances: int, a: int, b: int, node: str = "", outcome: str = "scheduled",
          tenant: str = "alpha") -> DemandFact:
    return DemandFact(f"demand-{pod}-{profile}-{outcome}", "c1", tenant, OWNERS[tenant][0], pod, f"uid-{pod}", profile,
                      instances, a, b, outcome, node, a if node else None, b if outcome == "scheduled" else None)


def test_the_idlest_workloads_with_owner_age_and_idle_hours(store):
    """Window 0..4 h. alpha's train-0 holds 2 GPUs 0..2 h: GPU 0 sampled all the time at 0.5
    SM-active, GPU 1 for its first hour only, idle (a telemetry gap is neither idle nor
    active): 4 GPU-hours held, 3 covered, 1 active, 2 idle, mean 1/3; no wait recorded, so its
    age runs from its first held instant (2 h). beta's nb-0 was created at 0:30 and holds 1 GPU
    1..5 h at 0.25: 3 h in the window, 2.25 idle; age 0:30..4 h = 3.5 h (samples after the
    window do not count). gamma's busy-0 was fully busy: no idle, not listed."""
    train = [_held("cf-train-0", "alpha", "train-0", "n1", 0, T0, T0 + 2 * H),
             _held("cf-train-1", "alpha", "train-0", "n1", 1, T0, T0 + 2 * H)]
    nb = _held("cf-nb", "beta", "nb-0", "n2", 0, T0 + H, T0 + 5 * H)
    busy = _held("cf-busy", "gamma", "busy-0", "n2", 1, T0, T0 + H)
    store.write_facts(FactBatch(
        capacity=[*train, nb, busy],
        utilization=_samples(train[0], [0.5] * 4) + _samples(train[1], [0.0] * 2) + _samples(nb, [0.25] * 8)
        + _samples(busy, [1.0] * 2),
        demand=[_wait("nb-0", "", 1, T0 + HALF_HOUR, T0 + H, node="n2", tenant="beta")]))
    window = {"f": T0, "t": T0 + 4 * H}
    _, rows = store.query(idle_workloads_sql(store.db), window)
    assert [tuple(r) for r in rows] == [
        ("beta", "p-beta", "cc-beta", "beta-ns", "nb-0", "pod", "n2", 3.5, 3.0, 0.25, 2.25),
        ("alpha", "p-alpha", "cc-alpha", "alpha-ns", "train-0", "pod", "n1", 2.0, 4.0, 0.333, 2.0)]
    _, rows = store.query(idle_workloads_sql(store.db, "tenant_id IN ('alpha', 'gamma')"), window)
    assert [r[4] for r in rows] == ["train-0"]


def test_unmet_demand_lands_in_the_class_of_its_node_or_profile_or_unknown(store):
    """Window 0..3 h. A 2-GPU pod waits 0:30..1:30 and is bound to n1 (H100-80GB); a 1-GPU pod
    waits 1..3 h and is never bound (no class can be known); two 3g.40gb instances wait 0..1 h
    unbound (A100-80GB offers the profile, at 3/7 of a GPU); a 7g.80gb instance nobody offers
    waits 2..2:30 h (weight 1, no class). A pod's end (completed) is no wait."""
    store.write_facts(FactBatch(
        capacity=[_held("mig-free", "", "", "m1", 0, T0, T0 + 3 * H, kind="unallocated", gpu_class="A100-80GB",
                        mode="mig", profile="3g.40gb", capacity_fraction=3 / 7, workload_kind="")],
        demand=[_wait("train-0", "", 2, T0 + HALF_HOUR, T0 + 90 * M, node="n1"),
                _wait("big-0", "", 1, T0 + H, T0 + 3 * H, outcome="ended without running"),
                _wait("mig-0", "3g.40gb", 2, T0, T0 + H, outcome="ended without running"),
                _wait("huge-0", "7g.80gb", 1, T0 + 2 * H, T0 + 150 * M, outcome="ended without running"),
                _wait("train-0", "", 2, T0 + HALF_HOUR, T0 + 2 * H, node="n1", outcome="completed")]))
    points, *_ = read_forecast_inputs(store, T0, T0 + 3 * H)
    unmet = {k[:3]: v for k, v in points.items() if k[4] == "unmet_gpus"}
    assert unmet == {("H100-80GB", "", "exclusive"): [(T0, 1.0), (T0 + H, 1.0)],
                     (UNKNOWN_CLASS, "", "exclusive"): [(T0 + H, 1.0), (T0 + 2 * H, 1.0)],
                     ("A100-80GB", "3g.40gb", "mig"): [(T0, pytest.approx(6 / 7, abs=1e-12))],
                     (UNKNOWN_CLASS, "7g.80gb", "mig"): [(T0 + 2 * H, 0.5)]}


def test_pods_still_pending_are_counted_by_age_until_the_evidence_ends(store):
    """Window 0..3 h, evidence to 2 h. alpha's wait-0 was created at 0:10 and is still pending
    (only its pending fact): pending until the evidence ends. beta's quick-0 waited 0:55..1:05
    (its pending fact and its wait). alpha's gone-0 was created at 1:00 and deleted at 1:20
    before any wait fact (its end fact): pending until then. At 0:30 wait-0 is 20 min old; at 1:00
    wait-0 50 min, quick-0 5 min; at 1:30 wait-0 80 min; at 2:00 the evidence has ended."""
    pending = lambda pod, a, tenant="alpha": _wait(pod, "", 1, a, a, outcome="pending", tenant=tenant)  # noqa: E731
    store.write_facts(FactBatch(
        capacity=[_held("cf-x", "gamma", "x-0", "n2", 0, T0, T0 + 2 * H)],
        demand=[pending("wait-0", T0 + 10 * M), pending("quick-0", T0 + 55 * M, "beta"),
                _wait("quick-0", "", 1, T0 + 55 * M, T0 + 65 * M, node="n2", tenant="beta"),
                pending("gone-0", T0 + H), _wait("gone-0", "", 1, T0 + H, T0 + 80 * M, outcome="deleted")]))
    window = {"f": T0, "t": T0 + 3 * H, "step": HALF_HOUR}
    _, rows = store.query(open_waits_sql(store.db), window)
    assert [(r[2], r[4], r[5], r[6]) for r in rows] == [
        ("uid-wait-0", T0 + 10 * M, True, T0 + 2 * H), ("uid-quick-0", T0 + 55 * M, False, T0 + 65 * M),
        ("uid-gone-0", T0 + H, True, T0 + 80 * M)]
    _, rows = store.query(pending_by_age_sql(store.db), window)
    assert [(int(t.timestamp() * 1000) if t.tzinfo else int(t.replace(tzinfo=dt.timezone.utc).timestamp() * 1000),
             age, n) for t, age, n in rows] == [
        (T0 + 30 * M, "10-60 min", 1), (T0 + H, "1-10 min", 1), (T0 + H, "10-60 min", 1),
        (T0 + H, "under 1 min", 1), (T0 + 90 * M, "over 1 h", 1)]
    _, rows = store.query(open_waits_sql(store.db, "tenant_id = 'beta'"), window)
    assert [r[2] for r in rows] == ["uid-quick-0"]
