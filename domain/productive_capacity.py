"""Productive work by the capacity class it ran on (pure): of each tenant's successful requests
and output tokens, how much an endpoint served on its owner's guaranteed capacity and how much
on borrowed capacity.

A quota is the owner's, per GPU class, not a pod's: at each instant the owner's held capacity
in the class is guaranteed up to the quota and borrowed above it (domain/quota.py, the same
sweep the bill uses). So an endpoint's work in an hour is split by the owner's borrowed share
of its held GPU-hours in the endpoint's class that hour (classes weighted by the endpoint's
GPU-hours in each). Work on an endpoint with no capacity in the hour (not declared, not
running on GPUs the evidence shows) is ``unknown``.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuledger.domain.quota import Quota, split_skus_by_quota

__all__ = ["HOUR_MS", "productive_by_capacity"]

HOUR_MS = 3_600_000
KINDS = ("guaranteed", "borrowed", "unknown")


def productive_by_capacity(work: Iterable[tuple], endpoint_intervals: Iterable[tuple], held: Iterable[tuple],
                           quotas: list[Quota]) -> dict[str, dict[str, dict[str, float]]]:
    """``work``: (tenant, hour_ms, endpoint, successful requests, output tokens);
    ``endpoint_intervals``: (endpoint, owner, class, from_ms, to_ms, GPU-equivalents, ...);
    ``held``: (tenant, class, sku, from_ms, to_ms, GPU-equivalents, ...). Returns per tenant
    {guaranteed|borrowed|unknown: {successful_requests, output_tokens}}."""
    by_endpoint: dict[str, list[tuple]] = {}
    for ep, owner, gpu_class, a, b, fraction, *_ in endpoint_intervals:
        by_endpoint.setdefault(ep, []).append((owner, gpu_class, a, b, fraction))
    held_by: dict[tuple[str, str], list[tuple]] = {}
    for h in held:
        held_by.setdefault((h[0], h[1]), []).append(tuple(h[:6]))
    borrowed_share: dict[tuple[str, str, int], float] = {}

    def share(owner: str, gpu_class: str, hour: int) -> float:
        key = (owner, gpu_class, hour)
        if key not in borrowed_share:
            mine = [h for h in held_by.get((owner, gpu_class), ()) if h[3] < hour + HOUR_MS and h[4] > hour]
            parts = split_skus_by_quota(mine, quotas, hour, hour + HOUR_MS).values()
            g, b = sum(p[0] for p in parts), sum(p[1] for p in parts)
            borrowed_share[key] = b / (g + b) if g + b > 0 else 0.0
        return borrowed_share[key]

    out: dict[str, dict[str, dict[str, float]]] = {}
    for tenant, hour, ep, requests, tokens in work:
        mine = out.setdefault(tenant, {k: {"successful_requests": 0.0, "output_tokens": 0.0} for k in KINDS})
        weights = {}
        for owner, gpu_class, a, b, fraction in by_endpoint.get(ep, ()):
            ms = min(b, hour + HOUR_MS) - max(a, hour)
            if ms > 0:
                weights[(owner, gpu_class)] = weights.get((owner, gpu_class), 0.0) + fraction * ms
        whole = sum(weights.values())
        borrowed = sum(w / whole * share(o, c, hour) for (o, c), w in weights.items()) if whole > 0 else None
        parts = {"unknown": 1.0} if borrowed is None else {"guaranteed": 1.0 - borrowed, "borrowed": borrowed}
        for kind, f in parts.items():
            mine[kind]["successful_requests"] += requests * f
            mine[kind]["output_tokens"] += tokens * f
    return {t: {k: {m: round(v, 6) for m, v in d.items()} for k, d in kinds.items()} for t, kinds in sorted(out.items())}
