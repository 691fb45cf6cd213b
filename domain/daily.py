"""A tenant's window day by day (pure): guaranteed, borrowed and idle GPU-hours and the
charges for the GPU-hours held, per UTC day, with the same definitions as the window's
totals in the showback, so that the days add up to them.

Days are half-open ``[00:00, next 00:00)`` UTC, clipped to the window ``[from_ms, as_of_ms)``
the showback covers (the first and last day may be partial).

- **Guaranteed and borrowed** are the quota split (domain/quota.py) of every held hour, run
  per rate-card window as the pricing does, and cut at day edges too. The split is decided
  per instant, so cutting the window at midnight changes nothing: the days add up to the
  tenant's ``guaranteed_gpu_hours`` and ``borrowed_gpu_hours`` (to float noise, 1e-9 h).
- **Idle** is covered minus active time. Per capacity fact the window's covered time is its
  samples' span capped at the fact's duration; a day gets the part of it that the samples
  observed that day span (same cap ratio), and the same share of active time, so the days
  add up to ``idle_allocated_gpu_hours`` (to 1e-9 h). A sample counts on the day it was
  observed.
- **GPU-hour charges** (``gpu_hour_cost``) are the guaranteed and borrowed lines only (not
  tokens, overhead, shared endpoints, committed quota or credits). The lines are priced per
  rate-card window in whole micro-GPU-hours and rounded to cents together, so a day has no
  line of its own: each day is weighted by its billed guaranteed and borrowed hours at the
  rates in force that day, and the tenant's rounded guaranteed + borrowed total is split over
  the days in whole cents by largest remainder. The days add up to that total exactly.
  Hours of a confidence the billing policy does not bill are in the hours, not the charges.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

from gpuledger.domain.cost import cents
from gpuledger.domain.pricing import Priced, rounded
from gpuledger.domain.quota import split_skus_by_quota
from gpuledger.domain.rows import parsed
from gpuledger.domain.suspense import BILL_CONFIDENCE
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["DAY_MS", "HELD_COMPONENTS", "daily_series", "day_spans"]

DAY_MS = 86_400_000
HELD_COMPONENTS = ("guaranteed", "borrowed")  # the lines a day's gpu_hour_cost adds up to


def day_spans(from_ms: int, to_ms: int) -> list[tuple[int, int]]:
    """``[from_ms, to_ms)`` cut at UTC midnights: ``[(start, end), ...]``."""
    out, a = [], from_ms
    while a < to_ms:
        b = min(to_ms, (a // DAY_MS + 1) * DAY_MS)
        out.append((a, b))
        a = b
    return out


def _billed(held: list[tuple], bill: tuple[str, ...] | None) -> list[tuple]:
    """The held intervals that bill tenants, as domain/pricing.py selects them."""
    return [h for h in held if bill is None or len(h) < 7 or h[6] in bill]


def _by_day(held: list[tuple], spans: list[tuple[int, int]]) -> list[list[tuple]]:
    """The held intervals (as 6-tuples) overlapping each day, in one pass."""
    out: list[list[tuple]] = [[] for _ in spans]
    if not spans:
        return out
    first_day, start, end = spans[0][0] // DAY_MS, spans[0][0], spans[-1][1]
    for h in held:
        a, b = max(h[3], start), min(h[4], end)
        for i in range(a // DAY_MS - first_day, (b - 1) // DAY_MS - first_day + 1) if a < b else ():
            out[i].append(h[:6])
    return out


def daily_series(rows: dict, priced: Priced, tenants: Iterable[str]) -> dict[str, list[dict]]:
    """Per tenant in ``tenants``: one entry per day of the window, zeros included, in order.

    ``rows``: the showback's query rows (sinks/showback_sql.py) after ``price_rows``;
    ``priced``: what ``price_rows`` returned. ``gpu_hour_cost`` is None without a rate card.
    """
    tenants = sorted(set(tenants))
    spans = day_spans(rows["from_ms"], rows.get("as_of_ms", rows["to_ms"]))
    index = {a // DAY_MS: i for i, (a, _) in enumerate(spans)}
    hours = {t: [[0.0, 0.0, 0.0] for _ in spans] for t in tenants}  # guaranteed, borrowed, idle
    weights = {t: [Fraction(0)] * len(spans) for t in tenants}  # exact GPU-hour charges per day
    held = [tuple(h) for h in rows.get("held", ())]
    held_by_day = _by_day(held, spans)  # allocation: every held hour
    billed_by_day = _by_day(_billed(held, rows.get("bill_confidence", BILL_CONFIDENCE)), spans)
    quotas, cards = parsed(rows, "quotas"), parsed(rows, "ratecards")
    by_version = {c.version: c for c in cards}
    for window in rows.get("windows", ()):
        card = by_version.get(window["version"])
        for i, (day_a, day_b) in enumerate(spans):
            a, b = max(day_a, window["from_ms"]), min(day_b, window["to_ms"])
            if a >= b:
                continue
            for (tenant, _, _), (g, bo) in split_skus_by_quota(held_by_day[i], quotas, a, b).items():
                if tenant in hours:
                    hours[tenant][i][0] += g
                    hours[tenant][i][1] += bo
            if card is None:
                continue
            for (tenant, gpu_class, _), (g, bo) in split_skus_by_quota(billed_by_day[i], quotas, a, b).items():
                rates = card.gpu_hour.get(gpu_class)
                if tenant in weights and rates is not None:
                    weights[tenant][i] += (Fraction(g) * Fraction(rates.get("guaranteed", Decimal(0)))
                                           + Fraction(bo) * Fraction(rates.get("borrowed", Decimal(0))))
    for tenant, day_ms, covered, active in rows.get("tenant_daily_utilization", ()):
        i = index.get(int(day_ms) // DAY_MS)
        if tenant in hours and i is not None:
            hours[tenant][i][2] += max(0.0, covered - active)
    money = _held_charges(priced, tenants) if cards else None
    out = {}
    for t in tenants:
        split = None if money is None else _split(money[t], weights[t], hours[t])
        out[t] = [{"day": format_rfc3339(a)[:10], "guaranteed_gpu_hours": g, "borrowed_gpu_hours": bo,
                   "idle_gpu_hours": idle, "gpu_hour_cost": None if split is None else float(split[i])}
                  for i, ((a, _), (g, bo, idle)) in enumerate(zip(spans, hours[t]))]
    return out


def _held_charges(priced: Priced, tenants: list[str]) -> dict[str, Decimal]:
    """Each tenant's guaranteed + borrowed lines, in the cents the showback and ledger show."""
    out = dict.fromkeys(tenants, Decimal(0))
    for line in rounded(priced.lines):
        if line.payer == "tenant" and line.tenant_id in out and line.component in HELD_COMPONENTS:
            out[line.tenant_id] += line.amount
    return out


def _split(total: Decimal, weights: list[Fraction], hours: list[list[float]]) -> list[Decimal]:
    """``total`` over the days in whole cents, by the days' exact charges (by their held hours
    where every charge is zero, so the cents still land on days something was held)."""
    keyed = dict(enumerate(weights))
    if not any(w > 0 for w in weights):
        keyed = {i: Fraction(g + bo) for i, (g, bo, _) in enumerate(hours)}
    if total and not any(w > 0 for w in keyed.values()):
        keyed = dict.fromkeys(keyed, Fraction(1))
    parts = cents(total, keyed) if keyed else {}
    return [parts.get(i, Decimal(0)) for i in range(len(weights))]
