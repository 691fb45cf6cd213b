"""The closed period: a ``gpuledger-ledger/1`` document (pure).

Built from the same priced lines as the showback (domain/rows.py), in whole cents that add
up. The content hash is sha256 over the canonical JSON (sorted keys, no whitespace) of the
document without ``hash``, ``status``, ``closed_at`` and the approval record (``prepared``,
``approval``, ``seal``: domain/approval.py), so the same evidence always gives the same hash. Evidence that changes a closed period becomes ``Correction`` lines in a
later close: the difference, line by line, between the period priced again and what was
already booked for it (its own lines plus earlier corrections); the closed document is
never edited.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from decimal import Decimal

import orjson

from gpuledger.domain.pricing import TELEMETRY_UNKNOWN, UNATTRIBUTED_TO_CENTRAL, Line, Priced
from gpuledger.domain.suspense import BILL_CONFIDENCE
from gpuledger.domain.rows import money_reconciliation
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

__all__ = ["ClosePolicy", "LEDGER_FORMAT", "NORMALIZATION_VERSION", "build_ledger", "content_hash", "corrections",
           "line_doc", "line_from_doc", "refusals"]

LEDGER_FORMAT = "gpuledger-ledger/1"
FACT_SCHEMAS = "capacity_fact/2 utilization_fact/2 request_fact/1 demand_fact/2"
# Not evidence (domain/approval.py); the source systems' versions describe the evidence, read
# from the source topics at close (sealed with the approval, not reproduced by a replay).
UNHASHED = ("hash", "status", "closed_at", "prepared", "approval", "seal", "source_versions")
MICRO = Decimal(1_000_000)
# The rules that turn source records into facts (units, field spellings, cadence, ownership):
# raised whenever a change to them can change a fact, so a document shows which rules made it.
NORMALIZATION_VERSION = "2026.12"


@dataclass(frozen=True)
class ClosePolicy:
    max_unattributed_ratio: float  # allocated capacity without a tenant, of physical
    max_difference_ratio: float  # |physical - accounted| (evidence gaps, over-allocation), of physical
    max_unpriced_gpu_hours: float  # allocated hours of classes no rate card prices
    max_outside_inventory_gpu_hours: float = 0.0  # evidence on GPUs the inventory does not approve then
    bill_confidence: tuple[str, ...] = BILL_CONFIDENCE  # the rest is suspense (domain/suspense.py)


def billing_policy(doc: dict) -> tuple[str, ...] | None:
    """The confidence classes a closed document billed, with ``TELEMETRY_UNKNOWN`` when its
    hours without telemetry billed and ``UNATTRIBUTED_TO_CENTRAL`` when its unattributed
    capacity went to central (as both did before the policy recorded them); None (all) for
    one closed before suspense existed, so pricing it again books no correction for the
    policy alone."""
    policy = doc.get("billing_policy")
    if policy is None:
        return None
    unknown = (TELEMETRY_UNKNOWN,) if policy.get("telemetry_unknown", "bill") == "bill" else ()
    central = (UNATTRIBUTED_TO_CENTRAL,) if policy.get("unattributed", "central") == "central" else ()
    return tuple(policy["bill_confidence"]) + unknown + central


_PSEUDO = (TELEMETRY_UNKNOWN, UNATTRIBUTED_TO_CENTRAL)


def _policy_doc(bill: tuple[str, ...] | None) -> dict:
    """The policy as the document records it. ``unattributed`` is written only as
    ``suspense``: absent, as in every document closed before it was recorded, it means
    ``central``, so pricing such a period again under its policy reproduces its hash."""
    classes = ("high", "medium", "modeled", *_PSEUDO) if bill is None else bill
    return {"bill_confidence": [c for c in classes if c not in _PSEUDO],
            "telemetry_unknown": "bill" if TELEMETRY_UNKNOWN in classes else "suspense",
            **({} if UNATTRIBUTED_TO_CENTRAL in classes else {"unattributed": "suspense"})}


def _hours(micro: int) -> str:
    return f"{Decimal(micro) / MICRO:.6f}"


def _money(x: Decimal) -> str:
    return f"{x:.2f}"


def _rate(x: Decimal) -> str:
    return f"{x:.2f}" if x == round(x, 2) else format(x.normalize(), "f")


def line_doc(ln: Line) -> dict:
    """A line as the document keeps it; ``holder`` only on unattributed capacity's lines."""
    return {"tenant_id": ln.tenant_id or None, "payer": ln.payer, "component": ln.component, "sku_id": ln.sku_id,
            "quantity": f"{ln.quantity:.6f}", "unit": ln.unit, "rate": _rate(ln.rate), "amount": _money(ln.amount),
            "list_amount": _money(ln.list_amount), "charge_class": ln.charge_class,
            "corrects_period": ln.corrects_period, "ratecard_version": ln.ratecard_version,
            "charge_period_start": format_rfc3339(ln.from_ms), "charge_period_end": format_rfc3339(ln.to_ms),
            "description": ln.description, **({"holder": ln.holder} if ln.holder else {})}


def line_from_doc(d: dict) -> Line:
    return Line(d["payer"], d["tenant_id"] or "", d["component"], d["sku_id"], d["unit"], Decimal(d["quantity"]),
                Decimal(d["rate"]), Decimal(d["amount"]), Decimal(d["list_amount"]), d["ratecard_version"],
                parse_rfc3339_ms(d["charge_period_start"]), parse_rfc3339_ms(d["charge_period_end"]),
                d["description"], d["charge_class"], d["corrects_period"], d.get("holder") or "")


def build_ledger(period: str, from_ms: int, to_ms: int, showback: dict, priced: Priced, lines: list[Line],
                 booked_corrections: list[Line], context: dict) -> dict:
    """``lines``: the period's own lines, rounded; ``context``: currency, ratecard versions,
    hierarchy rows, sources, dead-lettered count, evidence end."""
    every = lines + booked_corrections
    tenants: dict[str, dict[str, Decimal]] = {}
    for ln in every:
        if ln.payer in ("tenant", "suspense") and ln.tenant_id:
            t = tenants.setdefault(ln.tenant_id, {"charges": Decimal(0), "credits": Decimal(0),
                                                  "corrections": Decimal(0), "total": Decimal(0),
                                                  "under_review": Decimal(0)})
            if ln.payer == "suspense":  # shown to the tenant, paid by no one yet
                t["under_review"] += ln.amount
                continue
            bucket = "corrections" if ln.charge_class == "Correction" else (
                "credits" if ln.component == "credit" else "charges")
            t[bucket] += ln.amount
            t["total"] += ln.amount
    measured = {e["tenant_id"]: {
        **{k: f"{e[k]:.6f}" for k in ("allocated_gpu_hours", "guaranteed_gpu_hours", "borrowed_gpu_hours",
                                      "active_gpu_hours", "idle_allocated_gpu_hours", "service_share_gpu_hours")},
        "confidence_gpu_hours": {k: f"{v:.6f}" for k, v in e["confidence_gpu_hours"].items()},
        **({"reclaimed_gpu_hours": _reclaimed(e["reclaimed"])} if e.get("reclaimed") else {}),
        **({"daily": [_day(d) for d in e["daily"]]} if e.get("daily") else {}),
        **({"productive_by_capacity": {k: {m: f"{v:.6f}" for m, v in d.items()}
                                       for k, d in e["productive_by_capacity"].items()}}
           if e.get("productive_by_capacity") else {})}
        for e in showback["tenants"]}
    for o in (showback.get("cost_per_outcome") or {}).get("tenants", ()):  # the period's charges over its outcomes
        measured.setdefault(o["tenant_id"], {})["cost_per_outcome"] = {
            k: (None if o[k] is None else f"{o[k]:.6f}") if k.startswith("per_") else o[k]
            for k in ("successful_requests", "output_tokens", "completed_jobs", "per_successful_request",
                      "per_million_output_tokens", "per_completed_job")}
    micro = priced.micro_gpu_hours
    money = money_reconciliation(priced, lines)
    platform = showback["platform"]
    confidence = {"high": 0.0, "medium": 0.0, "modeled": 0.0}
    for e in showback["tenants"]:
        for k in confidence:
            confidence[k] += e["confidence_gpu_hours"][k]
    confidence["unattributed"] = platform["unattributed_gpu_hours"]
    return {
        "format": LEDGER_FORMAT,
        "period": period,
        "status": "closed",
        "hash": None,
        "period_start": format_rfc3339(from_ms), "period_end": format_rfc3339(to_ms),
        "evidence_to": format_rfc3339(context["evidence_to_ms"]),
        "schema_version": f"{LEDGER_FORMAT}; {FACT_SCHEMAS}",
        "ratecard_version": context["ratecard_versions"][0] if context["ratecard_versions"] else None,
        "ratecard_versions": context["ratecard_versions"],
        "currency": context["currency"],
        "billing_policy": _policy_doc(context.get("bill_confidence") or None),
        **({"calculation": context["calculation"]} if context.get("calculation") else {}),
        **({"commitments": _commitments(priced)} if priced.commitments else {}),
        "lines": [line_doc(ln) for ln in every],
        "tenants": [{"tenant_id": tid, **{k: _money(v) for k, v in t.items()}, **measured.get(tid, {})}
                    for tid, t in sorted(tenants.items())],
        "tenant_hierarchy": _hierarchy(context["hierarchy"]),
        "idle_gpu_hours": {k: f"{v:.6f}" for k, v in platform["idle_gpu_hours"].items()},
        "confidence_gpu_hours": {k: f"{v:.6f}" for k, v in confidence.items()},
        "reconciliation": {
            "physical_gpu_hours": _hours(micro["physical"]),
            "allocated_gpu_hours": _hours(micro["tenant"] + micro.get("suspense", 0) + micro["unattributed"]),
            # tenants' hours under review and unattributed capacity held in suspense
            "suspense_gpu_hours": _hours(micro.get("suspense", 0) + micro.get("unattributed_suspense", 0)),
            "unallocated_gpu_hours": _hours(micro["unallocated"] + micro["fragmentation"]),
            "unavailable_gpu_hours": _hours(micro["unavailable"]),
            "difference_gpu_hours": _hours(micro["unreconciled"]),
            "unattributed_gpu_hours": _hours(micro["unattributed"]),
            "outside_inventory_gpu_hours": f"{platform.get('outside_inventory_gpu_hours', 0.0):.6f}",
            **{k: _money(v) for k, v in money.items() if k != "difference"},
            "difference_money": _money(money["difference"]),
            "corrections": _money(sum((ln.amount for ln in booked_corrections), Decimal(0))),
        },
        "data_gaps": _gaps(showback, priced, context),
        "sources": context["sources"],
    }


def _reclaimed(block: dict) -> dict:
    """A tenant's GPU-hours the cluster took back (domain/preemption.py) as the document keeps
    them: held and borrowed per outcome (``preempted``, ``preempted_borrowed``, ...), and the
    same per GPU class for the outcomes that occurred in it."""
    out: dict = {k.removesuffix("_gpu_hours"): f"{v:.6f}" for k, v in block.items() if k.endswith("_gpu_hours")}
    out["by_class"] = {gpu_class: {f"{outcome}{suffix}": f"{v[key]:.6f}" for outcome, v in sorted(outcomes.items())
                                   for suffix, key in (("", "gpu_hours"), ("_borrowed", "borrowed_gpu_hours"))}
                       for gpu_class, outcomes in sorted(block.get("by_class", {}).items())}
    return out


def _day(d: dict) -> dict:
    """One day of a tenant's series (domain/daily.py) as the document keeps it: decimal strings."""
    return {k: v if k == "day" or v is None else (f"{v:.2f}" if k == "gpu_hour_cost" else f"{v:.6f}")
            for k, v in d.items()}


def _commitments(priced: Priced) -> list[dict]:
    """Guaranteed quota charged whether used or not (a committed-quota rate card)."""
    return [{"tenant_id": t, "gpu_class": c, "ratecard_version": v, "entitled_gpu_hours": _hours(e),
             "used_gpu_hours": _hours(u), "unused_gpu_hours": _hours(max(0, e - u))}
            for (t, c, v), (e, u) in sorted(priced.commitments.items())]


def _hierarchy(rows) -> list[dict]:
    out: dict[str, dict[str, set]] = {}
    for tenant, project, cost_center in rows:
        out.setdefault(tenant, {}).setdefault(project, set()).add(cost_center)
    return [{"tenant_id": t, "projects": [{"project_id": p, "cost_centers": sorted(c)} for p, c in sorted(ps.items())]}
            for t, ps in sorted(out.items())]


def _gaps(showback: dict, priced: Priced, context: dict) -> list[dict]:
    platform = showback["platform"]
    gaps = [{"kind": "unattributed_samples", "reason": r, "count": n}
            for r, n in sorted(platform["unattributed_samples"].items())]
    gaps += [{"kind": "unpriced_gpu_hours", "gpu_class": c, "gpu_hours": f"{h:.6f}"}
             for c, h in sorted(priced.unpriced_gpu_hours.items()) if h]
    unknown = platform["idle_gpu_hours"]["telemetry_unknown"]
    if unknown:
        gaps.append({"kind": "allocated_without_telemetry", "gpu_hours": f"{unknown:.6f}"})
    if priced.micro_gpu_hours["unreconciled"]:
        gaps.append({"kind": "physical_without_evidence", "gpu_hours": _hours(priced.micro_gpu_hours["unreconciled"])})
    gaps += [{"kind": "outside_inventory", "gpu_uuid": o["gpu_uuid"], "node": o["node"],
              "gpu_hours": f"{o['gpu_hours']:.6f}"} for o in platform.get("outside_inventory", ())]
    gaps += [{"kind": "evidence_short", "gpu_uuid": e["gpu_uuid"], "node": e["node"],
              "reached": format_rfc3339(e["reached_ms"]), "needed": format_rfc3339(e["needed_to_ms"])}
             for e in platform.get("evidence_short", ())]
    if context.get("dead_lettered"):
        gaps.append({"kind": "dead_lettered_records", "count": context["dead_lettered"]})
    return gaps


def refusals(doc: dict, priced: Priced, policy: ClosePolicy, to_ms: int) -> list[str]:
    """Why this period may not close yet; empty when it may."""
    out = []
    r = doc["reconciliation"]
    evidence = parse_rfc3339_ms(doc["evidence_to"])
    if evidence < to_ms:
        short = [g for g in doc.get("data_gaps", ()) if g["kind"] == "evidence_short"]
        which = "; ".join(f"{g['gpu_uuid']} on {g['node']} to {g['reached']} of {g['needed']}" for g in short[:5])
        more = "" if len(short) <= 5 else " and more"
        out.append(f"evidence reaches only {doc['evidence_to']}, the period ends {doc['period_end']}"
                   + (f"; GPUs that fall short of the period or of their inventory end: {which}{more}"
                      if short else "") + ": ingest and process the rest of the period, then close")
    if not doc["ratecard_versions"] or any(ln["charge_class"] == "Regular" and not ln["ratecard_version"]
                                           for ln in doc["lines"]):
        out.append("no rate card covers the period: publish ratecards.json with valid_from at or before the period")
    physical = Decimal(r["physical_gpu_hours"])
    if physical <= 0:
        out.append("the inventory has no physical capacity in the period: publish inventory.json")
        return out
    for what, value, limit, fix in (
            ("allocated with no tenant identity", Decimal(r["unattributed_gpu_hours"]), policy.max_unattributed_ratio,
             "label the namespaces with gpuledger.io/tenant, or raise close_max_unattributed_ratio"),
            ("of physical capacity not accounted for by evidence (difference)", abs(Decimal(r["difference_gpu_hours"])),
             policy.max_difference_ratio, "replay the missing evidence, or raise close_max_difference_ratio")):
        ratio = value / physical
        if ratio > Decimal(str(limit)):
            out.append(f"{value:.6f} GPU-hours ({ratio:.2%}) {what}; the policy allows {limit:.2%}: {fix}")
    outside = Decimal(r.get("outside_inventory_gpu_hours", "0"))
    if outside > Decimal(str(policy.max_outside_inventory_gpu_hours)):
        gpus = sorted({f"{g['gpu_uuid']} on {g['node']}" for g in doc.get("data_gaps", ()) if g["kind"] == "outside_inventory"})
        out.append(f"{outside:.6f} GPU-hours of evidence on GPUs outside the approved inventory ({', '.join(gpus[:5])}"
                   f"{' and more' if len(gpus) > 5 else ''}); the policy allows {policy.max_outside_inventory_gpu_hours}: "
                   "publish inventory.json with them (gpuledger load inventory FILE --cluster ID), "
                   "or raise close_max_outside_inventory_gpu_hours")
    unpriced = sum(priced.unpriced_gpu_hours.values())
    if unpriced > policy.max_unpriced_gpu_hours:
        classes = ", ".join(sorted(priced.unpriced_gpu_hours))
        out.append(f"{unpriced:.6f} allocated GPU-hours of {classes} have no rate: add the class to the rate card")
    if Decimal(r["difference_money"]) != 0:
        out.append(f"recoverable cost {r['recoverable_cost']} differs from tenant + central + subsidies + suspense - credits "
                   f"by {r['difference_money']}")
    return out


def content_hash(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k not in UNHASHED}
    return "sha256:" + hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _key(ln: Line) -> tuple:
    return (ln.payer, ln.tenant_id, ln.holder, ln.component, ln.sku_id, ln.unit, ln.rate, ln.ratecard_version,
            ln.from_ms, ln.to_ms)


def corrections(period: str, booked: list[Line], now: list[Line]) -> list[Line]:
    """Correction lines for a closed ``period``: ``now`` (priced again, rounded) minus
    ``booked`` (its closed lines plus corrections already booked), per line key."""
    totals: dict[tuple, list] = {}
    for sign, lines in ((-1, booked), (1, now)):
        for ln in lines:
            t = totals.setdefault(_key(ln), [Decimal(0), Decimal(0), Decimal(0), ln])
            t[0] += sign * ln.quantity
            t[1] += sign * ln.amount
            t[2] += sign * ln.list_amount
    out = []
    for quantity, amount, list_amount, ln in totals.values():
        if amount or quantity:
            out.append(replace(ln, quantity=quantity, amount=amount, list_amount=list_amount,
                               charge_class="Correction", corrects_period=period,
                               description=f"correction to {period}: {ln.description.split(': ', 1)[-1]}"))
    return sorted(out, key=lambda ln: (ln.payer, ln.tenant_id, ln.holder, ln.component, ln.sku_id, ln.from_ms))
