"""From query rows to priced lines (pure): take the reference entries in force (rate cards,
quotas, credits, endpoints, suspense decisions: domain/reference_history.py) once, build
shared-endpoint blocks, and price (domain/pricing.py).
Showback and the ledger both start here, so they can never price differently."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from fractions import Fraction

import orjson

from gpuledger.domain.cost import round_cents
from gpuledger.domain.endpoints import MICRO, declared_endpoints, endpoint_weights, largest_remainder, weighted_units
from gpuledger.domain.pricing import Priced, WindowCapacity, price, rounded
from gpuledger.domain.reference_history import PRICING_PARSERS, InForce, documents_used, in_force
from gpuledger.domain.suspense import BILL_CONFIDENCE, settle
from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["COST_PARTS", "PRICING_PARSERS", "canonical_sha256", "documents_in_force", "parsed", "money_reconciliation",
           "price_rows"]

COST_PARTS = ("guaranteed", "borrowed", "committed", "variable", "energy", "service_share", "overhead", "suspense_assigned",
              "credits", "endpoint_recovered", "total", "under_review")  # under review: shown, not in the total


def price_rows(rows: dict) -> Priced:
    """Price the rows; leaves the parsed cards (``cards``), endpoint blocks (``endpoint_blocks``:
    version, blocks) and the endpoint capacity refused for want of a declaration
    (``endpoint_refusals``) in ``rows`` for the documents built from them."""
    cards = rows["cards"] = parsed(rows, "ratecards")
    quotas, credits, declarations = parsed(rows, "quotas"), parsed(rows, "credits"), parsed(rows, "endpoints")
    capacity, intervals, rows["endpoint_refusals"] = declared_endpoints(
        declarations, rows["from_ms"], rows.get("endpoint_capacity", ()), rows.get("endpoint_intervals", ()))
    rows["declared_endpoint_intervals"] = intervals
    version, blocks, units = _endpoints(rows, capacity)
    rows["endpoint_blocks"] = (version, blocks)
    by_id = {c.version: c for c in cards}
    windows = [(by_id.get(w["version"]), WindowCapacity(
        w["from_ms"], w["to_ms"], {c: int(ms) for c, ms in w["physical"]},
        {(c, bucket): h for c, bucket, h in w["buckets"]}, tuple(tuple(e) for e in w.get("energy", ())),
        tuple(tuple(u) for u in w.get("unattributed", ()))))
        for w in rows.get("windows", ())]
    priced = price(windows, [tuple(r) for r in rows.get("held", ())], quotas, _tiered(rows, declarations),
                   [(b["endpoint_id"], b["owner_tenant_id"], units[b["endpoint_id"]]) for b in blocks],
                   intervals, credits, (rows["from_ms"], rows["to_ms"]), rows.get("bill_confidence", BILL_CONFIDENCE))
    priced.lines = settle(priced.lines, parsed(rows, "suspense"))
    return priced


def _tiered(rows: dict, declarations: list) -> list[tuple]:
    """Hourly tokens (tenant, hour, input, output[, endpoint]) with the service tier the
    endpoint was declared in that hour ('' when none) in place of the endpoint."""
    out = []
    for tenant, hour_ms, tin, tout, *endpoint in rows.get("hourly_tokens", ()):
        tier = next((d.service_tier for d in declarations if endpoint and d.endpoint_id == endpoint[0]
                     and d.in_force(hour_ms)), "")
        out.append((tenant, hour_ms, tin, tout, tier))
    return out


def _chosen(rows: dict, kind: str) -> InForce:
    """The entries of a pricing kind in force for ``rows`` (domain/reference_history.py), chosen
    once per rows and kept in ``rows["in_force"]`` for every reader of the same rows."""
    cache = rows.setdefault("in_force", {})
    if kind not in cache:
        cache[kind] = in_force(kind, rows.get(kind, ()))
    return cache[kind]


def parsed(rows: dict, kind: str) -> list:
    """The parsed entries of a pricing kind (``PRICING_PARSERS``) in force for ``rows``."""
    return _chosen(rows, kind).parsed


def canonical_sha256(value: object) -> str:
    """sha256 of a JSON value's canonical form (sorted keys, no whitespace)."""
    return "sha256:" + hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def documents_in_force(rows: dict) -> dict[str, list[str]]:
    """Per pricing reference kind, the canonical hashes of the documents whose entries in force
    priced the window ``[from_ms, to_ms)`` of ``rows``, the earliest publication first."""
    return {kind: [canonical_sha256(orjson.loads(doc))
                   for doc in documents_used(_chosen(rows, kind), rows["from_ms"], rows["to_ms"])]
            for kind in PRICING_PARSERS}


def money_reconciliation(priced: Priced, lines: list | None = None) -> dict[str, Decimal]:
    """recoverable cost (from physical capacity) = tenant charges + central charges +
    subsidies + suspense - credits, in the cents of the rounded lines; ``difference`` shows any gap."""
    tenant = central = subsidies = suspense = credits = Decimal(0)
    for line in rounded(priced.lines) if lines is None else lines:
        if line.component == "credit":
            credits -= line.amount
        elif line.component == "subsidy":
            subsidies += line.amount
        elif line.payer == "suspense":
            suspense += line.amount
        elif line.payer == "tenant":
            tenant += line.amount
        else:
            central += line.amount
    expected = round_cents(priced.recoverable)
    return {"tenant_charges": tenant, "central_charges": central, "subsidies": subsidies, "suspense": suspense,
            "credits": credits, "recoverable_cost": expected,
            "difference": expected - (tenant + central + subsidies + suspense - credits)}


def _endpoints(rows: dict, capacity: list[tuple]) -> tuple[str | None, list[dict], dict[str, dict[str, Fraction]]]:
    """Endpoint blocks with their shares in micro-GPU-hours, and each endpoint's exact
    weighted units per tenant (what money shares are split by, too)."""
    cards = [card for _, card in _chosen(rows, "ratecards").entries]
    version, w_in, w_out = endpoint_weights(cards, rows["from_ms"], parse_rfc3339_ms)
    usage: dict[str, dict[str, tuple]] = {}
    for ep, tid, n, ok, tin, tout in rows.get("endpoint_usage", ()):
        usage.setdefault(ep, {})[tid] = (n, ok, tin, tout)
    out, exact = [], {}
    for ep, owner, hours in capacity:
        total = round(hours * MICRO)
        units = exact[ep] = {tid: weighted_units(tin, tout, w_in, w_out)
                             for tid, (_, _, tin, tout) in usage.get(ep, {}).items()}
        parts = largest_remainder(total, units)
        whole = sum(units.values())
        shares = [{"tenant_id": tid, "weighted_units": float(u), "share": float(u / whole) if whole else 0.0,
                   "micro_gpu_hours": parts[tid], "gpu_hours": parts[tid] / MICRO, "cost": None}
                  for tid, u in sorted(units.items())]
        out.append({"endpoint_id": ep, "owner_tenant_id": owner, "allocated_gpu_hours": hours,
                    "allocated_micro_gpu_hours": total, "cost": None, "shares": shares,
                    "recovered_gpu_hours": sum(p for t, p in parts.items() if t != owner) / MICRO})
    return version, out, exact


