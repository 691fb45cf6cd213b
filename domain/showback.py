"""Assemble the ``gpuledger-showback/1`` document from query rows (pure).

Measurements stay apart: allocation (capacity facts), utilization (samples over covered
time). Terms that need quotas, rate cards or request events are ``null`` until those
inputs are processed, never a made-up zero.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from gpuledger.domain.cost import round_cents
from gpuledger.domain.daily import daily_series
from gpuledger.domain.preemption import reclaimed_by_tenant
from gpuledger.domain.productive_capacity import productive_by_capacity
from gpuledger.domain.pricing import Priced, rounded
from gpuledger.domain.quota import borrowing_over_limits
from gpuledger.domain.rows import COST_PARTS, money_reconciliation, parsed, price_rows
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["build_showback", "cost_per_outcome", "render_csv", "render_table"]

MODES = ("exclusive", "mig", "timeslice", "vgpu")


def build_showback(rows: dict, tenant: str | None = None, priced: Priced | None = None) -> dict:
    tenants: dict[str, dict] = {}

    def entry(tid: str) -> dict:
        if tid not in tenants:
            tenants[tid] = {
                "tenant_id": tid, "allocated_gpu_hours": 0.0, "allocated_by_mode": dict.fromkeys(MODES, 0.0),
                "mig_profile_hours": {}, "guaranteed_gpu_hours": 0.0, "borrowed_gpu_hours": 0.0,
                "gpu_hours_by_class": {},
                "active_gpu_hours": 0.0, "idle_allocated_gpu_hours": 0.0, "telemetry_coverage": 0.0,
                "covered_gpu_hours": 0.0, "service_share_gpu_hours": 0.0, "endpoint_recovered_gpu_hours": 0.0,
                "requests": 0, "successful_requests": 0, "input_tokens": 0, "output_tokens": 0,
                "confidence_gpu_hours": {"high": 0.0, "medium": 0.0, "modeled": 0.0},
                "entitlement": None,  # from quotas: guaranteed GPU-hours entitled, used, unused and their list value
                "reclaimed": None,  # GPU-hours of its pods the cluster preempted or evicted (domain/preemption.py)
                "borrow_limits": None,  # per class with a borrow limit: the limit, peak borrowed, GPU-hours over it
                # its successful requests and output tokens served on guaranteed or borrowed capacity
                "productive_by_capacity": None,
                "cost": None,
            }
        return tenants[tid]

    for tid, mode, confidence, hours in rows["tenant_capacity"]:
        e = entry(tid)
        e["allocated_gpu_hours"] += hours
        e["allocated_by_mode"][mode] = e["allocated_by_mode"].get(mode, 0.0) + hours
        if confidence in e["confidence_gpu_hours"]:
            e["confidence_gpu_hours"][confidence] += hours
    for tid, profile, hours in rows.get("tenant_profiles", ()):
        entry(tid)["mig_profile_hours"][profile] = hours
    for tid, covered, active in rows["tenant_utilization"]:
        e = entry(tid)
        e["covered_gpu_hours"] = covered
        e["active_gpu_hours"] = active
        e["idle_allocated_gpu_hours"] = max(0.0, covered - active)
    priced = priced or price_rows(rows)
    for (tid, gpu_class), (entitled, used, value) in sorted(priced.entitlement.items()):
        e = entry(tid)
        if e["entitlement"] is None:
            e["entitlement"] = {"unused_guaranteed_gpu_hours": 0.0, "unused_guaranteed_list_value": None, "by_class": {}}
        block = e["entitlement"]
        unused = max(0.0, entitled - used)
        block["by_class"][gpu_class] = {"entitled_gpu_hours": entitled, "used_gpu_hours": used,
                                        "unused_gpu_hours": unused,
                                        "unused_list_value": float(round_cents(value)) if rows.get("cards") else None}
        block["unused_guaranteed_gpu_hours"] += unused
        if rows.get("cards"):
            block["unused_guaranteed_list_value"] = float(round_cents(
                Decimal(str(block["unused_guaranteed_list_value"] or 0)) + round_cents(value)))
    for (tid, gpu_class), (guaranteed, borrowed) in sorted(priced.tenant_hours.items()):
        e = entry(tid)
        e["guaranteed_gpu_hours"] += guaranteed
        e["borrowed_gpu_hours"] += borrowed
        by_class = e["gpu_hours_by_class"].setdefault(gpu_class, {"guaranteed": 0.0, "borrowed": 0.0})
        by_class["guaranteed"] += guaranteed
        by_class["borrowed"] += borrowed
    for tid, block in reclaimed_by_tenant(rows).items():
        entry(tid)["reclaimed"] = block
    for (tid, gpu_class), over in borrowing_over_limits([tuple(h) for h in rows.get("held", ())], parsed(rows, "quotas"),
                                                       rows["from_ms"], rows["as_of_ms"]).items():
        entry(tid)["borrow_limits"] = {**(entry(tid)["borrow_limits"] or {}), gpu_class: over}
    for tid, block in productive_by_capacity(rows.get("hourly_endpoint_work", ()),
                                             rows.get("declared_endpoint_intervals", ()),
                                             [tuple(h) for h in rows.get("held", ())], parsed(rows, "quotas")).items():
        entry(tid)["productive_by_capacity"] = block
    work = []
    for tid, ep, model, n, ok, tin, tout, queue, ttft, e2e in rows.get("productive_work", ()):
        e = entry(tid)
        e["requests"] += n
        e["successful_requests"] += ok
        e["input_tokens"] += tin
        e["output_tokens"] += tout
        work.append({"tenant_id": tid, "endpoint_id": ep, "model": model, "requests": n, "successful_requests": ok,
                     "input_tokens": tin, "output_tokens": tout, "queue_s": _quantiles(queue),
                     "ttft_s": _quantiles(ttft), "e2e_s": _quantiles(e2e)})
    version, endpoints = rows["endpoint_blocks"]
    currency, money, totals = _costs(rows, priced, endpoints, entry)
    for ep in endpoints:
        entry(ep["owner_tenant_id"])["endpoint_recovered_gpu_hours"] += ep["recovered_gpu_hours"]
        for share in ep["shares"]:
            if share["tenant_id"] != ep["owner_tenant_id"]:
                entry(share["tenant_id"])["service_share_gpu_hours"] += share["gpu_hours"]
    for e in tenants.values():
        e["telemetry_coverage"] = e["covered_gpu_hours"] / e["allocated_gpu_hours"] if e["allocated_gpu_hours"] else 0.0

    by_kind = {"allocated": 0.0, "unallocated": 0.0, "unavailable": 0.0, "over_allocated": 0.0}
    unattributed = 0.0
    for kind, is_unattributed, hours in rows["platform_capacity"]:
        by_kind[kind] = by_kind.get(kind, 0.0) + hours
        if kind == "allocated" and is_unattributed:
            unattributed += hours
    physical = float(rows["physical"][0][0] or 0.0) if rows["physical"] else 0.0
    platform = {
        "physical_gpu_hours": physical,
        "allocated_gpu_hours": by_kind["allocated"],
        "unallocated_gpu_hours": by_kind["unallocated"],
        "unavailable_gpu_hours": by_kind["unavailable"],
        "unattributed_gpu_hours": unattributed,
        "over_allocated_gpu_hours": by_kind["over_allocated"],
        "unpriced_gpu_hours": priced.unpriced_gpu_hours,
        "cost": money,
        # rounded to 1e-9 h (3.6 us): sums of float hours carry that much noise, no more
        "difference_gpu_hours": round(physical - by_kind["allocated"] - by_kind["unallocated"]
                                      - by_kind["unavailable"], 9) + 0.0,
        "unattributed_samples": {reason: n for reason, n in rows["unattributed_samples"]},
        "outside_inventory_gpu_hours": by_kind.get("outside_inventory", 0.0),
        "outside_inventory": [{"gpu_uuid": g, "node": n, "gpu_hours": h}
                              for g, n, h in rows.get("outside_inventory", ())],
        "evidence_short_gpus": len(rows.get("evidence_short", ())),
        "evidence_short": [{"gpu_uuid": g, "node": n, "needed_to_ms": need, "reached_ms": reach}  # the furthest behind
                           for g, n, need, reach in rows.get("evidence_short", ())[:20]],
    }
    platform["idle_gpu_hours"] = _idle_classes(tenants.values(), platform, rows.get("fragmentation", ()))
    series = daily_series(rows, priced, [t for t in tenants if tenant is None or t == tenant])
    for tid, days in series.items():
        tenants[tid]["daily"] = days  # the window's hours and GPU-hour charges per UTC day (domain/daily.py)
    listed = sorted(tenants.values(), key=lambda e: e["tenant_id"])
    if tenant is not None:
        listed = [e for e in listed if e["tenant_id"] == tenant]
    return {
        "format": "gpuledger-showback/1",
        "period": {"from": format_rfc3339(rows["from_ms"]), "to": format_rfc3339(rows["to_ms"])},
        "as_of": format_rfc3339(rows["as_of_ms"]),
        "provisional": True,
        "ratecard_version": version,
        "currency": currency,
        "tenants": listed,
        "endpoints": endpoints,
        "endpoint_refusals": [r for r in rows.get("endpoint_refusals", ()) if tenant is None or r["tenant_id"] == tenant],
        "productive_work": [w for w in work if tenant is None or w["tenant_id"] == tenant],
        "cost_per_outcome": cost_per_outcome(totals, priced.endpoint_cost if currency else None, work, tenant,
                                             dict(rows.get("completed_jobs", ()))),
        "fragmentation": _fragmentation(rows.get("fragmentation", ()), rows.get("unhostable", ())),
        "platform": platform,
    }


def _fragmentation(rows, unhostable) -> list[dict]:
    """Per GPU class: free MIG instance-hours by profile, their GPU-equivalent, the GPU-hours
    no instance covers (a layout that leaves slices unusable), and free capacity that could
    not host a profile pods were waiting for."""
    out: dict[str, dict] = {}

    def entry(gpu_class: str) -> dict:
        return out.setdefault(gpu_class, {"gpu_class": gpu_class, "free_instance_hours": {},
                                          "free_gpu_equivalent_hours": 0.0, "unpartitioned_gpu_hours": 0.0,
                                          "could_not_host": []})

    for gpu_class, profile, waits, waited_h, free_h in unhostable:
        entry(gpu_class)["could_not_host"].append({"profile": profile, "waits": waits, "pod_hours_waited": waited_h,
                                                   "free_gpu_equivalent_hours_meanwhile": free_h})
    for gpu_class, profile, instance_hours, gpu_hours in rows:
        e = entry(gpu_class)
        if profile:
            e["free_instance_hours"][profile] = instance_hours
            e["free_gpu_equivalent_hours"] += gpu_hours
        else:
            e["unpartitioned_gpu_hours"] += gpu_hours
    return [out[k] for k in sorted(out)]


def _idle_classes(tenants, platform: dict, fragmentation_rows) -> dict:
    """Idle, never one bucket. Allocated = active + tenant-reserved idle + borrowed idle +
    telemetry-unknown; unallocated = platform unallocated + fragmentation (MIG capacity in no
    instance); unavailable = reliability reserve. A tenant's idle time is divided between its
    guaranteed and borrowed hours in proportion to them (idle is measured per sample, the
    quota split per instant)."""
    reserved = borrowed = unknown = 0.0
    for e in tenants:
        idle, allocated = e["idle_allocated_gpu_hours"], e["allocated_gpu_hours"]
        if allocated:
            reserved += idle * e["guaranteed_gpu_hours"] / allocated
            borrowed += idle * e["borrowed_gpu_hours"] / allocated
        unknown += max(0.0, allocated - e["covered_gpu_hours"])
    fragmentation = sum(gpu_hours for _, profile, _, gpu_hours in fragmentation_rows if not profile)
    return {"tenant_reserved": reserved, "borrowed": borrowed,
            "platform_unallocated": platform["unallocated_gpu_hours"] - fragmentation, "fragmentation": fragmentation,
            "reliability_reserve": platform["unavailable_gpu_hours"], "telemetry_unknown": unknown}


def _clip(a: int, b: int, lo: int, hi: int) -> int:
    return max(0, min(b, hi) - max(a, lo))


def _costs(rows: dict, priced: Priced, endpoints: list[dict], entry) -> tuple[str | None, dict | None]:
    """Tenant ``cost`` blocks and endpoint/share costs from the priced lines (domain/pricing.py),
    in whole cents that add up; the platform's money reconciliation."""
    if not rows["cards"]:
        return None, None, {}
    costs: dict[str, dict[str, Decimal]] = {}
    shown = rounded(priced.lines)
    for line in shown:
        if line.payer == "suspense" and line.tenant_id:
            c = costs.setdefault(line.tenant_id, dict.fromkeys(COST_PARTS, Decimal(0)))
            c["under_review"] += line.amount
            continue
        if line.payer != "tenant":
            continue
        c = costs.setdefault(line.tenant_id, dict.fromkeys(COST_PARTS, Decimal(0)))
        if line.component == "credit":
            c["credits"] -= line.amount
        elif line.component == "service_share" and line.amount < 0:
            c["endpoint_recovered"] -= line.amount
        else:
            c[line.component] += line.amount
        c["total"] += line.amount
    for ep in endpoints:
        ep["cost"] = float(priced.endpoint_cost.get(ep["endpoint_id"], 0))
        parts = priced.endpoint_parts.get(ep["endpoint_id"], {})
        for share in ep["shares"]:
            share["cost"] = float(parts.get(share["tenant_id"], 0))
    for tid, c in costs.items():
        entry(tid)["cost"] = {k: float(v) for k, v in c.items()}
    return (rows["cards"][0].currency, {k: float(v) for k, v in money_reconciliation(priced, shown).items()},
            {tid: c["total"] for tid, c in costs.items()})


_PER = Decimal("0.000001")


def _money6(x: Fraction) -> float:
    return float((Decimal(x.numerator) / Decimal(x.denominator)).quantize(_PER, ROUND_HALF_UP))


def _outcome(cost: Decimal | Fraction | None, successful: int, output_tokens: int) -> dict:
    """Cost over what it produced, to 1e-6 of the currency (half up, from the exact quotient);
    null where either is missing (no rate card, or nothing produced)."""
    exact = None if cost is None else Fraction(cost)
    return {"cost": None if exact is None else _money6(exact),
            "successful_requests": successful, "output_tokens": output_tokens,
            "per_successful_request": None if exact is None or not successful else _money6(exact / successful),
            "per_million_output_tokens": None if exact is None or not output_tokens
            else _money6(exact * 1_000_000 / output_tokens)}


def _per_job(cost: Decimal | None, completed: int) -> dict:
    return {"completed_jobs": completed,
            "per_completed_job": None if cost is None or not completed else _money6(Fraction(cost) / completed)}


def cost_per_outcome(tenant_totals: dict, endpoint_cost: dict | None, work: list[dict], tenant: str | None,
                     jobs: dict[str, int] | None = None) -> dict:
    """Cost per successful request and per million output tokens; per tenant also per completed
    job (``jobs``: GPU pods that finished, phase Succeeded, in the window).

    - per tenant: everything the tenant is charged in the window (its cost ``total``);
    - per endpoint: the endpoint's own GPU capacity at its owner's rates (what serving cost);
    - per model: each endpoint's capacity cost split over the models it served by successful
      requests (all of it where it served one model), summed per model.
    """
    by_tenant: dict[str, list[int]] = {}
    by_endpoint: dict[str, list[int]] = {}
    by_endpoint_model: dict[tuple[str, str], list[int]] = {}
    for w in work:
        for key, acc in ((w["tenant_id"], by_tenant), (w["endpoint_id"], by_endpoint),
                         ((w["endpoint_id"], w["model"]), by_endpoint_model)):
            got = acc.setdefault(key, [0, 0])
            got[0] += w["successful_requests"]
            got[1] += w["output_tokens"]
    models: dict[str, list] = {}
    for (ep, model), (ok, tout) in sorted(by_endpoint_model.items()):
        m = models.setdefault(model, [Fraction(0), 0, 0, endpoint_cost is not None])
        ep_ok = by_endpoint[ep][0]
        if endpoint_cost is not None and ep_ok:
            m[0] += Fraction(endpoint_cost.get(ep, Decimal(0))) * ok / ep_ok
        m[1] += ok
        m[2] += tout
    jobs = jobs or {}
    tenants = sorted(set(tenant_totals) | set(by_tenant) | set(jobs))
    return {
        "tenants": [{"tenant_id": t, **_outcome(tenant_totals.get(t, Decimal(0)) if endpoint_cost is not None else None,
                                                *by_tenant.get(t, (0, 0))),
                     **_per_job(tenant_totals.get(t, Decimal(0)) if endpoint_cost is not None else None,
                                jobs.get(t, 0))}
                    for t in tenants if tenant is None or t == tenant],
        "endpoints": [] if tenant is not None else [
            {"endpoint_id": ep, **_outcome(None if endpoint_cost is None else endpoint_cost.get(ep, Decimal(0)), ok, tout)}
            for ep, (ok, tout) in sorted(by_endpoint.items())],
        "models": [] if tenant is not None else [
            {"model": model, **_outcome(cost if priced_ else None, ok, tout)}
            for model, (cost, ok, tout, priced_) in sorted(models.items())],
    }


def _quantiles(values) -> dict:
    values = list(values or ())
    keys = ("p50", "p95", "p99")
    return dict(zip(keys, values)) if len(values) == 3 else dict.fromkeys(keys)


_COLUMNS = [("tenant", "tenant_id", "{}"), ("allocated_h", "allocated_gpu_hours", "{:.3f}"),
            ("borrowed_h", "borrowed_gpu_hours", "{:.3f}"),
            ("active_h", "active_gpu_hours", "{:.3f}"), ("idle_h", "idle_allocated_gpu_hours", "{:.3f}"),
            ("coverage", "telemetry_coverage", "{:.1%}"), ("high_conf_h", None, "{:.3f}"),
            ("modeled_h", "modeled", "{:.3f}"), ("service_h", "service_share_gpu_hours", "{:.3f}"),
            ("requests", "requests", "{}"), ("cost", "cost", "{}")]


def _cells(e: dict) -> list[str]:
    out = []
    for _, key, fmt in _COLUMNS:
        value = (e["confidence_gpu_hours"]["high"] if key is None else e["confidence_gpu_hours"]["modeled"]
                 if key == "modeled" else e[key])
        if key == "cost":
            value = "-" if value is None else f"{value['total']:.2f}"
        out.append(fmt.format(value))
    return out


def render_table(doc: dict) -> str:
    header = [c[0] for c in _COLUMNS]
    body = [_cells(e) for e in doc["tenants"]]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    money = f", money in {doc['currency']} by rate card {doc['ratecard_version']}" if doc.get("currency") else ""
    out = [f"showback {doc['period']['from']} .. {doc['period']['to']} (evidence to {doc['as_of']}, provisional{money})",
           line(header), line(["-" * w for w in widths]), *map(line, body)]
    p = doc["platform"]
    out.append("")
    out.append("platform GPU-hours: physical {physical_gpu_hours:.3f} = allocated {allocated_gpu_hours:.3f} "
               "+ unallocated {unallocated_gpu_hours:.3f} + unavailable {unavailable_gpu_hours:.3f} "
               "+ difference {difference_gpu_hours:.3f}; unattributed {unattributed_gpu_hours:.3f}".format(**p))
    if p["over_allocated_gpu_hours"]:
        out.append(f"OVER-ALLOCATED GPU-hours (approved weights above 1 GPU): {p['over_allocated_gpu_hours']:.3f}")
    for ep in doc["endpoints"]:
        shares = ", ".join(f"{s['tenant_id']} {s['gpu_hours']:.3f}" for s in ep["shares"])
        out.append(f"endpoint {ep['endpoint_id']} (owner {ep['owner_tenant_id']}, {ep['allocated_gpu_hours']:.3f} h) "
                   f"shared by weighted tokens: {shares or 'no successful requests'}")
    for r in doc.get("endpoint_refusals", ()):
        out.append(f"endpoint label not applied: {r['tenant_id']}/{r['namespace']} {r['allocated_gpu_hours']:.3f} h "
                   f"stay with {r['tenant_id']} ({r['reason']})")
    for reason, n in p["unattributed_samples"].items():
        out.append(f"unattributed samples: {n} ({reason})")
    return "\n".join(out)


def render_csv(doc: dict) -> str:
    rows = [",".join(c[0] for c in _COLUMNS)]
    for e in doc["tenants"]:
        rows.append(",".join([e["tenant_id"], *(f"{v}" for v in (
            e["allocated_gpu_hours"], e["borrowed_gpu_hours"], e["active_gpu_hours"], e["idle_allocated_gpu_hours"],
            e["telemetry_coverage"], e["confidence_gpu_hours"]["high"], e["confidence_gpu_hours"]["modeled"],
            e["service_share_gpu_hours"], e["requests"], "" if e["cost"] is None else e["cost"]["total"]))]))
    return "\n".join(rows) + "\n"
