"""Capacity the cluster took back (pure): the GPU-hours held by pods that were then preempted
or evicted, per tenant and GPU class, split into guaranteed and borrowed by the same quota
sweep as the bill (domain/quota.py), so the borrowed part is exactly the borrowed capacity
that was reclaimed.

Held intervals come tagged with the pod that held them; ``disrupted`` names the pods the watch
stream says the cluster ended (demand facts with outcome ``preempted`` or ``evicted``,
domain/demand.py). All of a tenant's held intervals go through the sweep together — the quota
is shared per instant by everything the tenant holds — and only the disrupted pods' parts are
reported.
"""

from __future__ import annotations

from gpuledger.domain.quota import Quota, split_skus_by_quota
from gpuledger.domain.rows import parsed

__all__ = ["OUTCOMES", "reclaimed_by_tenant", "reclaimed_gpu_hours"]

OUTCOMES = ("preempted", "evicted")


def reclaimed_gpu_hours(held: list[tuple], disrupted: dict[str, str], quotas: list[Quota], from_ms: int,
                        to_ms: int) -> dict[tuple[str, str], dict]:
    """held: (tenant, class, sku, from_ms, to_ms, GPU-equivalents, confidence, pod_uid);
    disrupted: pod UID -> outcome. Returns {(tenant, class): {outcome: {"gpu_hours",
    "guaranteed_gpu_hours", "borrowed_gpu_hours", "pods"}}} for the outcomes that occurred."""
    tagged, pods = [], {}
    for h in held:
        outcome = disrupted.get(h[7], "") if len(h) > 7 else ""
        tagged.append((h[0], h[1], outcome, h[3], h[4], h[5]))
        if outcome and min(h[4], to_ms) > max(h[3], from_ms):
            pods.setdefault((h[0], h[1], outcome), set()).add(h[7])
    out: dict[tuple[str, str], dict] = {}
    for (tenant, gpu_class, outcome), (g, b) in sorted(split_skus_by_quota(tagged, quotas, from_ms, to_ms).items()):
        if outcome and g + b > 0:
            out.setdefault((tenant, gpu_class), {})[outcome] = {
                "gpu_hours": g + b, "guaranteed_gpu_hours": g, "borrowed_gpu_hours": b,
                "pods": len(pods.get((tenant, gpu_class, outcome), ()))}
    return out


def reclaimed_by_tenant(rows: dict) -> dict[str, dict]:
    """The showback's per-tenant ``reclaimed`` block from the query rows (``held``,
    ``disrupted_pods``, ``quotas``): totals per outcome and the same per GPU class."""
    quotas = parsed(rows, "quotas")
    split = reclaimed_gpu_hours([tuple(h) for h in rows.get("held", ())], dict(rows.get("disrupted_pods", ())),
                                quotas, rows["from_ms"], rows["as_of_ms"])
    out: dict[str, dict] = {}
    for (tenant, gpu_class), outcomes in split.items():
        block = out.setdefault(tenant, {**{f"{o}_{k}": 0.0 for o in OUTCOMES
                                           for k in ("gpu_hours", "borrowed_gpu_hours")},
                                        **{f"pods_{o}": 0 for o in OUTCOMES}, "by_class": {}})
        for outcome, v in outcomes.items():
            block[f"{outcome}_gpu_hours"] += v["gpu_hours"]
            block[f"{outcome}_borrowed_gpu_hours"] += v["borrowed_gpu_hours"]
            block[f"pods_{outcome}"] += v["pods"]
        block["by_class"][gpu_class] = outcomes
    return out
