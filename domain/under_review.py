"""Which GPU-hours are under review rather than billed, by the billing policy (pure).

A billing policy is a tuple of the confidence classes that bill tenants plus pseudo-classes:
``TELEMETRY_UNKNOWN`` bills allocated hours without telemetry (without it their uncovered
share is under review), ``UNATTRIBUTED_TO_CENTRAL`` charges unattributed capacity to central
(without it that capacity is under review per holder). None bills everything, as before
suspense existed. domain/pricing.py prices what is selected here; domain/suspense.py settles it.
Intervals are half-open ``[from_ms, to_ms)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

__all__ = ["TELEMETRY_UNKNOWN", "UNATTRIBUTED_TO_CENTRAL", "review_hours", "split_held", "unattributed_hours"]

# In a billing policy, the pseudo-class that bills allocated hours without telemetry; without
# it those hours are suspense like an unbilled confidence class (domain/suspense.py).
TELEMETRY_UNKNOWN = "telemetry_unknown"
# In a billing policy, the pseudo-class that charges unattributed capacity (allocated with no
# tenant) to the central account directly; without it that capacity is suspense per holder.
UNATTRIBUTED_TO_CENTRAL = "unattributed_to_central"


def split_held(held: list[tuple], bill: tuple[str, ...] | None) -> tuple[list[tuple], list[tuple]]:
    """Held intervals (tenant, class, SKU, from_ms, to_ms, GPU-equivalents[, confidence, pod,
    covered share]) as (billed, under review), each as the first six columns: a confidence
    outside ``bill`` is under review, and so is the uncovered share of the rest unless ``bill``
    holds ``TELEMETRY_UNKNOWN``."""
    billed = [h[:6] for h in held if bill is None or len(h) < 7 or h[6] in bill]
    review = [h[:6] for h in held if bill is not None and len(h) >= 7 and h[6] not in bill]
    if bill is not None and TELEMETRY_UNKNOWN not in bill:
        billed, unknown = _without_telemetry([h for h in held if len(h) < 7 or h[6] in bill])
        review += unknown
    return billed, review


def _without_telemetry(held: list[tuple]) -> tuple[list[tuple], list[tuple]]:
    """Split each held interval by the share of it its telemetry covered (9th column, 0..1;
    None or absent: covered): the covered share bills, the rest is under review. The interval
    keeps its span and the GPU-equivalents are scaled, so the review hours are exactly the
    allocated hours without telemetry and the quota sweep sees the covered level."""
    billed, unknown = [], []
    for h in held:
        covered = 1.0 if len(h) < 9 or h[8] is None else min(1.0, max(0.0, float(h[8])))
        if covered > 0:
            billed.append((*h[:5], h[5] * covered))
        if covered < 1:
            unknown.append((*h[:5], h[5] * (1 - covered)))
    return billed, unknown


def review_hours(review: list[tuple], from_ms: int, to_ms: int) -> dict[tuple[str, str, str], float]:
    """Under-review GPU-hours per (tenant, class, SKU) in the window."""
    out: dict[tuple[str, str, str], float] = {}
    for tenant, gpu_class, sku, a, b, fraction in review:
        ms = min(b, to_ms) - max(a, from_ms)
        if ms > 0:
            out[(tenant, gpu_class, sku)] = out.get((tenant, gpu_class, sku), 0.0) + float(fraction) * ms / 3_600_000
    return out


def unattributed_hours(rows: Iterable[tuple], buckets: dict[tuple[str, str], float]
                       ) -> dict[str, dict[tuple[str, str], Fraction]]:
    """``rows``: (class, SKU, holder, GPU-hours) of unattributed capacity; ``buckets``: the
    window's (class, bucket) -> GPU-hours. Per class, its ``unattributed`` bucket split by
    (SKU, holder) in proportion to each holder's GPU-hours, so the parts add up to the bucket
    exactly (the partition, and so the hours identity, is the same whoever pays). A class
    whose bucket has no holder rows keeps it whole (central)."""
    by_class: dict[str, dict[tuple[str, str], Fraction]] = {}
    for gpu_class, sku, holder, hours in rows:
        if hours > 0:
            mine = by_class.setdefault(gpu_class, {})
            mine[(sku, holder)] = mine.get((sku, holder), Fraction(0)) + Fraction(hours)
    out = {}
    for gpu_class, mine in by_class.items():
        bucket = Fraction(max(0.0, buckets.get((gpu_class, "unattributed"), 0.0)))
        whole = sum(mine.values(), Fraction(0))
        if bucket and whole:
            out[gpu_class] = {k: bucket * h / whole for k, h in mine.items()}
    return out
