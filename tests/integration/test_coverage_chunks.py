"""Coverage read a chunk of capacity facts at a time (sinks/coverage_sql.py), on the real
engine: the chunked readings equal one query over the whole window and the truth computed
here, and the held intervals come back one row per holding, not per fact.

The facts are generated: six devices (exclusive, a MIG instance, a time-slice replica) over
two hours that cross a UTC midnight, pods coming and going in capacity facts of one minute
(the worker's aligned minutes), DCGM samples at 10 s with jitter, lost scrapes, a 6-minute
outage on one device, and one device scraped every 2 minutes, whose samples are split at
the facts' edges and so are observed up to 2 minutes before the fact a part belongs to
(chunks start on such edges: a chunk that read its samples from its first start would lose them).
The MIG instance's power is its parent's series at the same time, as dcgm-exporter reports it.
"""

import random

import pytest

from gpuledger.domain.facts import CapacityFact, FactBatch, UtilizationFact
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.energy_sql import energy_sql, read_energy_rows
from gpuledger.sinks.coverage_sql import (
    buckets_sql, chunks, held_intervals_sql, read_coverage_rows, tenant_daily_utilization_sql, tenant_utilization_sql)

pytestmark = pytest.mark.integration

M, H, DAY = 60_000, 3_600_000, 86_400_000
T0 = 1_790_899_200_000 - H  # 2026-10-01T23:00:00Z
F, T = T0 + 7 * M, T0 + 2 * H - 3 * M  # the window, cut inside facts at both ends
DEVICES = [("GPU-0", "GPU-0", 1.0, 10_000), ("GPU-1", "GPU-1", 1.0, 10_000), ("GPU-2", "GPU-2", 1.0, 10_000),
           ("GPU-3", "MIG-3a", 3 / 7, 10_000), ("GPU-4", "GPU-4::1", 0.25, 10_000), ("GPU-5", "GPU-5", 1.0, 120_000)]
OUTAGE = ("GPU-1", T0 + 50 * M, T0 + 56 * M)


def _cap(fid, gpu, device, fraction, a, b, tenant, pod, confidence):
    return CapacityFact(
        fact_id=fid, cluster_id="c1", kind="allocated" if tenant else "unallocated", gpu_uuid=gpu, device_id=device,
        node="n1", gpu_class="H100-80GB", mode="mig" if device.startswith("MIG") else "exclusive",
        profile="3g.40gb" if device.startswith("MIG") else "", capacity_fraction=fraction, valid_from_ms=a,
        valid_to_ms=b, tenant_id=tenant, project_id="", cost_center="", namespace=f"{tenant}-ns" if tenant else "",
        namespace_uid="", pod_name=pod, pod_uid=f"uid-{pod}" if pod else "", container="", endpoint_id="",
        workload_kind="pod", confidence=confidence if tenant else "unattributed", reason="", src_topic="t",
        src_partition=0, src_offset=0)


def _util(gpu, device, t, a, b, ratio, cap_id, watts=None):
    return UtilizationFact(
        fact_id=f"u-{device}-{t}-{a}", cluster_id="c1", gpu_uuid=gpu, device_id=device, node="n1",
        observed_at_ms=t, span_ms=b - a, sm_active_ratio=ratio, fb_used_bytes=None, power_w=watts, energy_j=None,
        capacity_fact_id=cap_id, kind="allocated", tenant_id="", project_id="", namespace="", pod_name="",
        pod_uid="", confidence="high", reason="", src_topic="t", src_partition=0, src_offset=0)


def _generate(seed=5):
    rng = random.Random(seed)
    caps, utils = [], []
    for gpu, device, fraction, cadence in DEVICES:
        minute, facts = 0, []
        while minute < 120:  # a holding (or a free stretch) of 3-40 minutes, in one-minute facts
            length = min(120 - minute, rng.randrange(3, 40))
            who = rng.choice(["", "alpha", "beta", "gamma"])
            pod, confidence = f"{who}-{gpu}-{minute}" if who else "", rng.choice(["high", "high", "medium"])
            for k in range(minute, minute + length):
                fid = f"c-{device}-{k}"
                facts.append((T0 + k * M, T0 + (k + 1) * M, fid))
                caps.append(_cap(fid, gpu, device, fraction, T0 + k * M, T0 + (k + 1) * M, who, pod, confidence))
            minute += length
        times = [t + rng.randrange(-2_000, 2_000) for t in range(T0 + 3_000, T0 + 2 * H, cadence)]
        times = [t for t in times if rng.random() > 0.05  # lost scrapes
                 and not (gpu == OUTAGE[0] and OUTAGE[1] <= t < OUTAGE[2])]
        for t, nxt in zip(times, times[1:] + [None]):
            end = nxt if nxt is not None and nxt - t <= 4 * cadence else t + cadence
            ratio = rng.random()
            watts = round(100 + 600 * ratio, 1)
            mig = device.startswith("MIG-")
            if mig:  # the parent's series carries the power; the instance's carries none (as dcgm-exporter)
                utils.append(_util(gpu, gpu, t, t, end, ratio, "", watts))
            for a_f, b_f, fid in facts:  # the sample split at the facts' edges, each part keeping its time
                a, b = max(t, a_f), min(end, b_f)
                if a < b:
                    utils.append(_util(gpu, device, t, a, b, ratio, fid, None if mig else watts))
    return caps, utils


CAPS, UTILS = _generate()


def _truth():
    """Per allocated fact in the window: (fact, covered ms, active ms, span ms, day -> (span, act))."""
    samples: dict[str, list[UtilizationFact]] = {}
    for u in UTILS:
        if F <= u.observed_at_ms < T:
            samples.setdefault(u.capacity_fact_id, []).append(u)
    out = []
    for c in CAPS:
        if c.kind != "allocated" or not (c.valid_to_ms > F and c.valid_from_ms < T):
            continue
        a, b = max(c.valid_from_ms, F), min(c.valid_to_ms, T)
        mine = samples.get(c.fact_id, [])
        span = sum(u.span_ms for u in mine)
        act = sum(u.span_ms * u.sm_active_ratio for u in mine)
        cap = min(1.0, (b - a) / span) if span else 0.0
        days: dict[int, list[float]] = {}
        for u in mine:
            d = days.setdefault(u.observed_at_ms // DAY * DAY, [0.0, 0.0])
            d[0] += u.span_ms * cap
            d[1] += u.span_ms * u.sm_active_ratio * cap
        out.append((c, min(span, b - a), act * cap, (b - a), days))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ClickHouseStore(f"chdb://{tmp_path_factory.mktemp('held') / 'clickhouse'}")
    s.ensure_schema()
    s.write_facts(FactBatch(capacity=CAPS, utilization=UTILS))
    yield s
    s.close()


def test_chunked_coverage_equals_one_query_and_the_truth(store):
    p = {"f": F, "t": T}
    got = read_coverage_rows(store, F, T, chunk_facts=40)  # about 45 facts a 10-minute bucket: a chunk each
    buckets = [tuple(r) for r in store.query(buckets_sql(store.db), p)[1]]
    assert len(list(chunks(buckets, F, T, 40))) == len(buckets) == 12
    whole = {r[0]: r[1:] for r in store.query(tenant_utilization_sql(store.db), p)[1]}
    truth: dict[str, list[float]] = {}
    for c, covered, active, _, _ in _truth():
        acc = truth.setdefault(c.tenant_id, [0.0, 0.0])
        acc[0] += c.capacity_fraction * covered / H
        acc[1] += c.capacity_fraction * active / H
    assert set(truth) == {"alpha", "beta", "gamma"} and {r[0] for r in got["tenant_utilization"]} == set(truth)
    for tenant, covered, active in got["tenant_utilization"]:
        assert (covered, active) == pytest.approx(tuple(truth[tenant]), rel=1e-9)
        assert (covered, active) == pytest.approx(tuple(whole[tenant]), rel=1e-9)
    daily_truth: dict[tuple, list[float]] = {}
    for c, _, _, _, days in _truth():
        for day, (span, act) in days.items():
            acc = daily_truth.setdefault((c.tenant_id, day), [0.0, 0.0])
            acc[0] += c.capacity_fraction * span / H
            acc[1] += c.capacity_fraction * act / H
    daily_whole = {tuple(r[:2]): r[2:] for r in store.query(tenant_daily_utilization_sql(store.db), p)[1]}
    assert {tuple(r[:2]) for r in got["tenant_daily_utilization"]} == set(daily_truth)
    assert len({r[1] for r in got["tenant_daily_utilization"]}) == 2  # the window crosses midnight
    for tenant, day, covered, active in got["tenant_daily_utilization"]:
        assert (covered, active) == pytest.approx(tuple(daily_truth[(tenant, day)]), rel=1e-9)
        assert (covered, active) == pytest.approx(tuple(daily_whole[(tenant, day)]), rel=1e-9)


def test_held_intervals_come_back_one_row_per_holding_with_its_hours_and_coverage(store):
    held = read_coverage_rows(store, F, T, chunk_facts=40)["held"]
    facts = _truth()
    # One row per run of a device's facts of one pod whose covered shares are equal.
    runs, last = 0, None
    for c, covered, _, clipped, _ in sorted(facts, key=lambda x: (x[0].device_id, x[0].valid_from_ms)):
        key = (c.device_id, c.pod_uid, c.confidence, covered / clipped)
        runs += last is None or last[0] != key or last[1] != c.valid_from_ms
        last = (key, c.valid_to_ms)
    assert len(held) == runs < len(facts) / 4
    assert any(r[8] < 1.0 for r in held) and any(r[8] == 1.0 for r in held)  # the outage and lost scrapes show

    def hours(rows, covered):
        out: dict[tuple, float] = {}
        for r in rows:
            clipped = min(r[4], T) - max(r[3], F)
            key = (r[0], r[2], r[6], r[7])
            out[key] = out.get(key, 0.0) + r[5] * clipped * (r[8] if covered else 1.0) / H
        return out

    truth_rows = [(c.tenant_id, c.gpu_class, c.gpu_class + ("/" + c.profile if c.profile else ""), c.valid_from_ms,
                   c.valid_to_ms, c.capacity_fraction, c.confidence, c.pod_uid, covered / clipped)
                  for c, covered, _, clipped, _ in facts]
    for covered in (False, True):
        want, have = hours(truth_rows, covered), hours(held, covered)
        assert set(have) == set(want)
        for key, value in want.items():
            assert have[key] == pytest.approx(value, rel=1e-9), key
    whole = store.query(held_intervals_sql(store.db), {"f": F, "t": T})[1]  # joined in one query: the same rows
    assert sorted(tuple(r[:-1]) for r in whole) == sorted(held)


def test_energy_read_chunk_by_chunk_equals_one_query_and_the_truth(store):
    got = read_energy_rows(store, F, T, chunk_facts=40)
    whole = store.query(energy_sql(store.db), {"f": F, "t": T})[1]
    parent = {(u.gpu_uuid, u.observed_at_ms): u.power_w for u in UTILS if u.device_id == u.gpu_uuid}
    caps = {c.fact_id: c for c in CAPS if c.kind == "allocated"}
    truth: dict[tuple, float] = {}
    for u in UTILS:
        c = caps.get(u.capacity_fact_id)
        if c is not None and F <= u.observed_at_ms < T:
            watts = parent[(u.gpu_uuid, u.observed_at_ms)] if u.device_id.startswith("MIG-") else u.power_w
            key = ("H100-80GB", c.tenant_id, c.confidence)
            truth[key] = truth.get(key, 0.0) + c.capacity_fraction * u.span_ms * watts / 1000
    tenants = {tuple(r[:3]): r[3] for r in got if r[1]}
    assert set(tenants) == set(truth) and len(truth) >= 5
    for key, joules in truth.items():
        assert tenants[key] == pytest.approx(joules, rel=1e-9), key
    assert sorted(tuple(r[:3]) for r in got) == sorted(tuple(r[:3]) for r in whole)
    for r, w in zip(sorted(got), sorted(whole)):
        assert r[3] == pytest.approx(w[3], rel=1e-9)
