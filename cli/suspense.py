"""``gpuledger suspense list|assign|release``: the allocated GPU-hours under review (a
confidence the billing policy does not bill) and the decisions that settle them
(domain/suspense.py).

``assign`` and ``release`` append one decision to the cluster's decision list, read from the
reference topic (so decisions made before ``process`` ran are kept), and publish the whole
list as a new ``suspense`` reference document; ``process`` applies it. In an open period the
settled hours are booked as ``suspense_assigned`` lines; in a closed one they become
correction lines at the next close.
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal
from pathlib import Path

import orjson

from gpuledger.config import Settings

__all__ = ["add_parsers"]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def under_review(s: Settings, period: str, tenant: str | None) -> dict:
    """The period's under-review hours per tenant and SKU, with the decision in force on each."""
    from gpuledger.domain.ledger import billing_policy
    from gpuledger.domain.pricing import rounded
    from gpuledger.domain.reference_history import in_force as entries_in_force
    from gpuledger.domain.rows import price_rows
    from gpuledger.domain.suspense import billing_classes, in_force
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.ledger.close import period_window
    from gpuledger.sinks.ledger_store import ClickHouseLedger
    from gpuledger.sinks.query import open_reader
    from gpuledger.sinks.showback_sql import read_showback_rows

    reader = open_reader(s.home, s.effective_dsn())
    closed = next((d for d in ClickHouseLedger(reader).closed() if d["period"] == period), None)
    bill = billing_policy(closed) if closed else billing_classes(s.close_bill_confidence.split(","), s.close_telemetry_unknown)
    from_ms, to_ms = period_window(period)
    rows = read_showback_rows(reader, from_ms, to_ms, bill)
    decisions = entries_in_force("suspense", rows.get("suspense", ())).parsed
    rows["suspense"] = []  # every suspense line, settled or not: the decisions are shown beside them
    lines = [ln for ln in rounded(price_rows(rows).lines) if ln.payer == "suspense"]
    force = in_force(decisions)
    items: dict[tuple[str, str], dict] = {}
    for ln in lines:
        if tenant and ln.tenant_id != tenant:
            continue
        it = items.setdefault((ln.tenant_id, ln.sku_id), {"tenant_id": ln.tenant_id, "sku_id": ln.sku_id,
                                                          "gpu_hours": Decimal(0), "list_amount": Decimal(0)})
        it["gpu_hours"] += ln.quantity
        it["list_amount"] += ln.amount
    out = []
    for (tid, sku), it in sorted(items.items()):
        a = force.get((period, tid, sku)) or force.get((period, tid, None))
        out.append({**it, "gpu_hours": f"{it['gpu_hours']:.6f}", "list_amount": f"{it['list_amount']:.2f}",
                    "status": "under review" if a is None else f"assigned to {a.to}",
                    "decision": None if a is None else {"assignment_id": a.assignment_id, "to": a.to, "by": a.by,
                                                        "reason": a.reason, "at": format_rfc3339(a.at_ms)}})
    return {"period": period, "closed": closed is not None, "bill_confidence": list(bill or ()), "items": out,
            "decisions": [{"assignment_id": a.assignment_id, "period": a.period, "tenant_id": a.tenant_id,
                           "sku_id": a.sku_id, "to": a.to, "by": a.by, "reason": a.reason,
                           "at": format_rfc3339(a.at_ms)} for a in decisions if a.period == period]}


def cmd_list(s: Settings, args) -> int:
    doc = under_review(s, args.period, args.tenant)
    if args.format == "json":
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return 0
    print(f"suspense {doc['period']} ({'closed: decisions book corrections at the next close' if doc['closed'] else 'open'}"
          f"; billed confidence: {', '.join(doc['bill_confidence']) or 'all'})")
    if not doc["items"]:
        print("  nothing under review")
    for it in doc["items"]:
        d = it["decision"]
        why = f" by {d['by']}: {d['reason']}" if d else ""
        print(f"  {it['tenant_id']:<16} {it['sku_id']:<20} {it['gpu_hours']:>14} GPU-h {it['list_amount']:>12}  "
              f"{it['status']}{why}")
    return 0


def _decide(s: Settings, args, to: str) -> int:
    from gpuledger.bus.publisher import KafkaPublisher
    from gpuledger.bus.reference import latest_reference
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for
    from gpuledger.domain.suspense import parse_assignments
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.producers.capture import load_reference

    topics, client = topics_for(s), client_config(s)
    ensure_topics(s.kafka_bootstrap, topics, client=client)
    current = latest_reference(s.kafka_bootstrap, topics, args.cluster, "suspense", client)
    decisions = orjson.loads(current) if current else []
    now_ms = int(time.time() * 1000)
    decisions.append({"assignment_id": f"{args.period}/{args.tenant}/{args.sku or '*'}/{len(decisions) + 1}",
                      "period": args.period, "tenant_id": args.tenant, "sku_id": args.sku, "to": to,
                      "reason": args.reason, "by": args.by, "at": format_rfc3339(now_ms)})
    raw = orjson.dumps(decisions, option=orjson.OPT_INDENT_2)
    try:
        parse_assignments(orjson.loads(raw))  # refused here, before anything is published
    except ValueError as exc:
        _progress(f"suspense: refused, nothing published: {exc}")
        return 2
    path = Path(s.home) / "suspense" / f"{args.cluster}-{now_ms}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    load_reference(path, "suspense", args.cluster, KafkaPublisher(s.kafka_bootstrap, client=client), topics,
                   lambda: int(time.time() * 1000))
    what = "released back to review" if to == "suspense" else f"assigned to {to}"
    _progress(f"suspense: {args.tenant}'s {args.sku or 'every SKU'} hours of {args.period} {what} by {args.by} "
              f"(decision {decisions[-1]['assignment_id']}); `gpuledger process` applies it")
    return 0


def add_parsers(sub) -> None:
    sp = sub.add_parser("suspense", help="allocated GPU-hours under review, and the decisions that settle them")
    actions = sp.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="under-review hours of a period, per tenant and SKU, with their decisions")
    ls.add_argument("--period", required=True, help="YYYY-MM")
    ls.add_argument("--tenant")
    ls.add_argument("--format", choices=["table", "json"], default="table")
    ls.set_defaults(func=cmd_list)
    for name, helptext in (("assign", "settle a tenant's under-review hours of a period: to a tenant, or central"),
                           ("release", "put settled hours back under review")):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("--cluster", required=True, help="the cluster_id the hours belong to")
        a.add_argument("--period", required=True, help="YYYY-MM")
        a.add_argument("--tenant", required=True, help="whose under-review hours")
        a.add_argument("--sku", help="one SKU (default: every SKU of the tenant in the period)")
        if name == "assign":
            a.add_argument("--to", required=True, help="the tenant that pays, or central")
        a.add_argument("--reason", required=True)
        a.add_argument("--by", required=True, help="who decides")
        a.set_defaults(func=lambda s, args, n=name: _decide(s, args, args.to if n == "assign" else "suspense"))
