"""Quotas split allocation into guaranteed and borrowed capacity: at each instant, a
tenant's allocated GPU-equivalents of a GPU class up to its guaranteed quota are
guaranteed, the rest borrowed (over quota). Quotas are effective-dated, ``[valid_from,
valid_to)``."""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.bounds import check_rate
from gpuledger.domain.timeutil import MS_PER_HOUR, parse_rfc3339_ms

__all__ = ["Quota", "QuotaError", "borrowing_over_limits", "parse_quotas", "quota_in_force", "split_by_quota",
           "split_skus_by_quota"]


class QuotaError(ValueError):
    """quotas.json does not have the documented shape."""


@dataclass(frozen=True)
class Quota:
    tenant_id: str
    gpu_class: str
    guaranteed_gpus: float
    valid_from_ms: int
    valid_to_ms: int | None
    borrow_limit_gpus: float | None = None  # GPU-equivalents it may hold above its guarantee; None: no limit


def parse_quotas(doc: list) -> list[Quota]:
    if not isinstance(doc, list):
        raise QuotaError("quotas must be a JSON list")
    out = []
    for i, q in enumerate(doc):
        try:
            limit = q.get("borrow_limit_gpus")
            for name, value in (("guaranteed_gpus", q["guaranteed_gpus"]),
                                *((("borrow_limit_gpus", limit),) if limit is not None else ())):
                reason = check_rate(value, name)
                if reason:
                    raise ValueError(reason)
            out.append(Quota(str(q["tenant_id"]), str(q["gpu_class"]), float(q["guaranteed_gpus"]),
                             parse_rfc3339_ms(q["valid_from"]),
                             parse_rfc3339_ms(q["valid_to"]) if q.get("valid_to") else None,
                             None if limit is None else float(limit)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise QuotaError(f"quotas[{i}]: {exc!r}; needs tenant_id, gpu_class, guaranteed_gpus, valid_from") from exc
    return out


def quota_in_force(quotas: list[Quota], t_ms: int) -> Quota | None:
    """Of one tenant's quotas for a class, the one in force at ``t_ms``: the latest to start."""
    current = [q for q in quotas if q.valid_from_ms <= t_ms and (q.valid_to_ms is None or t_ms < q.valid_to_ms)]
    return max(current, key=lambda q: q.valid_from_ms) if current else None


def _quota_at(quotas: list[Quota], t_ms: int) -> float:
    q = quota_in_force(quotas, t_ms)
    return q.guaranteed_gpus if q else 0.0


def borrowing_over_limits(held: list[tuple], quotas: list[Quota], from_ms: int,
                          to_ms: int) -> dict[tuple[str, str], dict[str, float]]:
    """held: (tenant, class, sku, from_ms, to_ms, GPU-equivalents, ...) -> for each (tenant,
    class) whose quota in force sets ``borrow_limit_gpus`` at some instant of ``[from_ms,
    to_ms)``: ``borrow_limit_gpus`` (the latest limit seen), ``peak_borrowed_gpus`` (held above
    the guarantee, at its highest) and ``gpu_hours_over_limit`` (borrowed beyond the limit,
    integrated over time)."""
    limited = {(q.tenant_id, q.gpu_class) for q in quotas if q.borrow_limit_gpus is not None}
    steps: dict[tuple[str, str], dict[int, float]] = {}
    for h in held:
        tenant, gpu_class, a, b, fraction = h[0], h[1], max(h[3], from_ms), min(h[4], to_ms), h[5]
        if (tenant, gpu_class) in limited and a < b:
            s = steps.setdefault((tenant, gpu_class), {})
            s[a] = s.get(a, 0.0) + fraction
            s[b] = s.get(b, 0.0) - fraction
    out = {}
    for key, s in sorted(steps.items()):
        mine = [q for q in quotas if (q.tenant_id, q.gpu_class) == key]
        times = sorted(set(s) | {t for q in mine for t in (q.valid_from_ms, q.valid_to_ms) if t and from_ms < t < to_ms})
        level, peak, over_ms, limit_seen = 0.0, 0.0, 0.0, None
        for t, nxt in zip(times, times[1:]):
            level = round(level + s.get(t, 0.0), 9)
            q = quota_in_force(mine, t)
            borrowed = max(0.0, level - (q.guaranteed_gpus if q else 0.0))
            peak = max(peak, borrowed)
            if q is not None and q.borrow_limit_gpus is not None:
                limit_seen = q.borrow_limit_gpus
                over_ms += max(0.0, borrowed - q.borrow_limit_gpus) * (nxt - t)
        if limit_seen is not None:
            out[key] = {"borrow_limit_gpus": limit_seen, "peak_borrowed_gpus": peak,
                        "gpu_hours_over_limit": over_ms / MS_PER_HOUR}
    return out


def split_by_quota(held: list[tuple[str, str, int, int, float]], quotas: list[Quota], from_ms: int,
                   to_ms: int) -> dict[tuple[str, str], tuple[float, float]]:
    """held: (tenant, gpu class, from_ms, to_ms, GPU-equivalents) intervals ->
    {(tenant, class): (guaranteed GPU-hours, borrowed GPU-hours)} over ``[from_ms, to_ms)``."""
    by_sku = split_skus_by_quota([(t, c, c, a, b, f) for t, c, a, b, f in held], quotas, from_ms, to_ms)
    return {(t, c): v for (t, c, _), v in by_sku.items()}


def split_skus_by_quota(held: list[tuple[str, str, str, int, int, float]], quotas: list[Quota], from_ms: int,
                        to_ms: int) -> dict[tuple[str, str, str], tuple[float, float]]:
    """held: (tenant, gpu class, sku, from_ms, to_ms, GPU-equivalents) ->
    {(tenant, class, sku): (guaranteed GPU-hours, borrowed GPU-hours)}. The quota applies to
    the class; at each instant the guaranteed part is shared by the SKUs held (a MIG
    profile, a vGPU profile, whole GPUs) in proportion to what each holds."""
    changes: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    for tenant, gpu_class, sku, a, b, fraction in held:
        a, b = max(a, from_ms), min(b, to_ms)
        if a < b:
            steps = changes.setdefault((tenant, gpu_class), {}).setdefault(sku, {})
            steps[a] = steps.get(a, 0.0) + fraction
            steps[b] = steps.get(b, 0.0) - fraction
    out = {}
    for key, skus in changes.items():
        mine = [q for q in quotas if (q.tenant_id, q.gpu_class) == key]
        cuts = {t for steps in skus.values() for t in steps}
        cuts |= {t for q in mine for t in (q.valid_from_ms, q.valid_to_ms) if t and from_ms < t < to_ms}
        guaranteed_ms, borrowed_ms = dict.fromkeys(skus, 0.0), dict.fromkeys(skus, 0.0)
        levels = dict.fromkeys(skus, 0.0)
        times = sorted(cuts)
        for t, nxt in zip(times, times[1:]):
            for sku, steps in skus.items():  # GPU-equivalents held in [t, nxt)
                levels[sku] = round(levels[sku] + steps.get(t, 0.0), 9)
            total = sum(levels.values())
            if total <= 0:
                continue
            share = min(total, _quota_at(mine, t)) / total
            for sku, level in levels.items():
                guaranteed_ms[sku] += level * share * (nxt - t)
                borrowed_ms[sku] += level * (1 - share) * (nxt - t)
        for sku in skus:
            out[(*key, sku)] = (guaranteed_ms[sku] / MS_PER_HOUR, borrowed_ms[sku] / MS_PER_HOUR)
    return out


def entitled_gpu_hours(quotas: list[Quota], from_ms: int, to_ms: int) -> dict[tuple[str, str], float]:
    """{(tenant, class): guaranteed GPU-hours the quotas in force entitle it to over
    ``[from_ms, to_ms)``}, used or not (the latest quota starting at or before an instant
    counts, as in ``split_skus_by_quota``)."""
    out: dict[tuple[str, str], float] = {}
    for key in sorted({(q.tenant_id, q.gpu_class) for q in quotas}):
        mine = [q for q in quotas if (q.tenant_id, q.gpu_class) == key]
        cuts = sorted({from_ms, to_ms} | {t for q in mine for t in (q.valid_from_ms, q.valid_to_ms)
                                          if t is not None and from_ms < t < to_ms})
        ms = sum(_quota_at(mine, a) * (b - a) for a, b in zip(cuts, cuts[1:]))
        if ms > 0:
            out[key] = ms / MS_PER_HOUR
    return out
