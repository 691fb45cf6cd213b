"""``gpuledger diff``: a replayed period against the closed ledger plus its corrections,
line by line (pure).

Both sides are summed per line key and per the period a line belongs to: a closed
period's own lines, plus every correction later closes booked for it, against the replay's
lines; corrections a period booked for earlier periods are compared under those periods.
"""

from __future__ import annotations

from decimal import Decimal

from gpuledger.domain.ledger import line_from_doc
from gpuledger.domain.pricing import Line
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["diff_ledgers", "render_diff"]


def _key(period: str, ln: Line) -> tuple:
    return (ln.corrects_period or period, ln.payer, ln.tenant_id, ln.holder, ln.component, ln.sku_id, ln.unit, ln.rate,
            ln.ratecard_version, ln.from_ms, ln.to_ms)


def _sum(into: dict, period: str, lines: list[Line], side: int) -> None:
    for ln in lines:
        t = into.setdefault(_key(period, ln), [Decimal(0)] * 4)
        t[side] += ln.quantity
        t[side + 2] += ln.amount


def diff_ledgers(closed: list[dict], period: str, replayed: dict) -> list[dict]:
    """Differences between what the ledger holds for ``period`` and the replay's document."""
    totals: dict[tuple, list[Decimal]] = {}
    for doc in closed:
        if doc["period"] == period:
            _sum(totals, period, [line_from_doc(d) for d in doc["lines"]], 0)
        else:
            _sum(totals, doc["period"], [line_from_doc(d) for d in doc["lines"] if d["corrects_period"] == period], 0)
    _sum(totals, period, [line_from_doc(d) for d in replayed["lines"]], 1)
    out = []
    for key, (q_closed, q_replay, a_closed, a_replay) in sorted(totals.items(), key=lambda kv: str(kv[0])):
        if q_closed != q_replay or a_closed != a_replay:
            of, payer, tenant, holder, component, sku, unit, rate, version, f, t = key
            out.append({"period": of, "payer": payer, "tenant_id": tenant or None,
                        **({"holder": holder} if holder else {}), "component": component,
                        "sku_id": sku, "unit": unit, "rate": str(rate), "ratecard_version": version,
                        "charge_period_start": format_rfc3339(f), "charge_period_end": format_rfc3339(t),
                        "ledger_quantity": f"{q_closed:.6f}", "replay_quantity": f"{q_replay:.6f}",
                        "ledger_amount": f"{a_closed:.2f}", "replay_amount": f"{a_replay:.2f}",
                        "difference": f"{a_replay - a_closed:.2f}"})
    return out


def render_diff(lines: list[dict]) -> str:
    rows = [f"{d['period']} {d['payer']:<7} {d['tenant_id'] or d.get('holder') or '-':<12} {d['component']:<14} "
            f"{d['sku_id']:<20} "
            f"{d['unit']:<14} ledger {d['ledger_quantity']:>16} / {d['ledger_amount']:>12}   "
            f"replay {d['replay_quantity']:>16} / {d['replay_amount']:>12}   difference {d['difference']}"
            for d in lines]
    return "\n".join(rows)
