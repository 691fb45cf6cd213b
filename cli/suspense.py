"""``gpuledger suspense list|assign|release``: the allocated GPU-hours under review (a
confidence the billing policy does not bill) and the decisions that settle them
(domain/suspense.py).

``assign`` and ``release`` append one decision to the cluster's decision list, read from the
reference topic (so decisions made before ``process`` ran are kept), and publish the whole
list as a new ``suspense`` reference document; ``process`` applies it. A tenant's hours are
named by ``--tenant``, unattributed capacity's by ``--holder`` (``namespace/NAME``,
``vm/NAME``). In an open period the settled hours are booked as ``suspense_assigned``
lines; in a closed one they become correction lines at the next close. ``gpuledger load
suspense FILE`` publishes a whole list, and is refused when it would drop or change a
recorded decision (``append_only_refusal``).
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
    """The period's under-review hours per tenant (or, for unattributed capacity, per holder)
    and SKU, with the decision in force on each; unattributed items name the reasons the
    evidence gave."""
    from gpuledger.domain.ledger import billing_policy
    from gpuledger.domain.pricing import rounded
    from gpuledger.domain.reference_history import in_force as entries_in_force
    from gpuledger.domain.rows import price_rows
    from gpuledger.domain.suspense import billing_classes, decision_for, in_force
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.ledger.close import period_window
    from gpuledger.sinks.ledger_store import ClickHouseLedger
    from gpuledger.sinks.query import open_reader
    from gpuledger.sinks.showback_sql import read_showback_rows, unattributed_reasons_sql

    reader = open_reader(s.home, s.effective_dsn())
    closed = next((d for d in ClickHouseLedger(reader).closed() if d["period"] == period), None)
    bill = billing_policy(closed) if closed else billing_classes(s.close_bill_confidence.split(","),
                                                                 s.close_telemetry_unknown, s.close_unattributed)
    from_ms, to_ms = period_window(period)
    rows = read_showback_rows(reader, from_ms, to_ms, bill)
    decisions = entries_in_force("suspense", rows.get("suspense", ())).parsed
    rows["suspense"] = []  # every suspense line, settled or not: the decisions are shown beside them
    lines = [ln for ln in rounded(price_rows(rows).lines) if ln.payer == "suspense"]
    force = in_force(decisions)
    items: dict[tuple[str, str, str], dict] = {}
    for ln in lines:
        if tenant and ln.tenant_id != tenant:
            continue
        it = items.setdefault((ln.tenant_id, ln.holder, ln.sku_id), {
            "tenant_id": ln.tenant_id or None, "holder": ln.holder or None, "sku_id": ln.sku_id,
            "gpu_hours": Decimal(0), "list_amount": Decimal(0)})
        it["gpu_hours"] += ln.quantity
        it["list_amount"] += ln.amount
    reasons: dict[tuple[str, str], list[dict]] = {}
    if any(holder for _, holder, _ in items):
        for holder, sku, reason, hours in reader.query(unattributed_reasons_sql(reader.db),
                                                       {"f": from_ms, "t": rows["as_of_ms"]})[1]:
            reasons.setdefault((holder, sku), []).append({"reason": reason, "gpu_hours": f"{hours:.6f}"})
    out = []
    for (tid, holder, sku), it in sorted(items.items()):
        a = decision_for(force, period, tid, holder, sku)
        out.append({**it, "gpu_hours": f"{it['gpu_hours']:.6f}", "list_amount": f"{it['list_amount']:.2f}",
                    "status": "under review" if a is None else f"assigned to {a.to}",
                    "decision": None if a is None else {"assignment_id": a.assignment_id, "to": a.to, "by": a.by,
                                                        "reason": a.reason, "at": format_rfc3339(a.at_ms)},
                    **({"reasons": reasons.get((holder, sku), [])} if holder else {})})
    return {"period": period, "closed": closed is not None, "bill_confidence": list(bill or ()), "items": out,
            "decisions": [{"assignment_id": a.assignment_id, "period": a.period, "tenant_id": a.tenant_id or None,
                           "holder": a.holder or None, "sku_id": a.sku_id, "to": a.to, "by": a.by,
                           "reason": a.reason, "at": format_rfc3339(a.at_ms)} for a in decisions if a.period == period]}


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
        whose = it["tenant_id"] or f"{it['holder']} (no tenant)"
        print(f"  {whose:<16} {it['sku_id']:<20} {it['gpu_hours']:>14} GPU-h {it['list_amount']:>12}  "
              f"{it['status']}{why}")
        for r in it.get("reasons", ()):
            print(f"      {r['gpu_hours']:>14} GPU-h  {r['reason'] or '(no reason given)'}")
    return 0


def append_only_refusal(recorded_raw: str | None, proposed: list) -> str | None:
    """Why publishing the decision list ``proposed`` would rewrite the record (the recorded
    list ``recorded_raw``, as last published), or None. A recorded list that does not parse
    is not in force, so it binds nothing."""
    from gpuledger.domain.suspense import parse_assignments, rewritten

    try:
        recorded = parse_assignments(orjson.loads(recorded_raw)) if recorded_raw else []
    except ValueError:
        return None
    lost = rewritten(recorded, proposed)
    if not lost:
        return None
    return (f"the list drops or changes {len(lost)} recorded decision(s): {', '.join(lost)}. Decisions are "
            "append-only: publish the recorded list with new decisions after it, or use `gpuledger suspense "
            "assign` (a new decision replaces an earlier one for the same hours) or `gpuledger suspense release`")


def recorded_decisions(s: Settings, cluster: str) -> str | None:
    """The cluster's decision list as last published on the reference topic."""
    from gpuledger.bus.reference import latest_reference
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for

    topics, client = topics_for(s), client_config(s)
    ensure_topics(s.kafka_bootstrap, topics, client=client)
    return latest_reference(s.kafka_bootstrap, topics, cluster, "suspense", client)


def _decide(s: Settings, args, to: str) -> int:
    from gpuledger.bus.publisher import KafkaPublisher
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import topics_for
    from gpuledger.domain.suspense import parse_assignments
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.producers.capture import load_reference

    topics, client = topics_for(s), client_config(s)
    current = recorded_decisions(s, args.cluster)
    decisions = orjson.loads(current) if current else []
    now_ms = int(time.time() * 1000)
    whose = args.tenant or args.holder
    decisions.append({"assignment_id": f"{args.period}/{whose}/{args.sku or '*'}/{len(decisions) + 1}",
                      "period": args.period, "tenant_id": args.tenant or "",
                      **({"holder": args.holder} if args.holder else {}), "sku_id": args.sku, "to": to,
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
    owner = f"{args.tenant}'s" if args.tenant else f"{args.holder}'s unattributed"
    _progress(f"suspense: {owner} {args.sku or 'every SKU'} hours of {args.period} {what} by {args.by} "
              f"(decision {decisions[-1]['assignment_id']}); `gpuledger process` applies it")
    return 0


def add_parsers(sub) -> None:
    sp = sub.add_parser("suspense", help="allocated GPU-hours under review, and the decisions that settle them")
    actions = sp.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="under-review hours of a period, per tenant (or holder) and SKU, with their "
                                         "decisions")
    ls.add_argument("--period", required=True, help="YYYY-MM")
    ls.add_argument("--tenant", help="only this tenant's hours (unattributed ones have none)")
    ls.add_argument("--format", choices=["table", "json"], default="table")
    ls.set_defaults(func=cmd_list)
    for name, helptext in (("assign", "settle under-review hours of a period: to a tenant, or central"),
                           ("release", "put settled hours back under review")):
        a = actions.add_parser(name, help=helptext)
        a.add_argument("--cluster", required=True, help="the cluster_id the hours belong to")
        a.add_argument("--period", required=True, help="YYYY-MM")
        whose = a.add_mutually_exclusive_group(required=True)
        whose.add_argument("--tenant", help="whose under-review hours")
        whose.add_argument("--holder", help="unattributed hours: the namespace/NAME or vm/NAME that held them "
                                            "(as `suspense list` shows)")
        a.add_argument("--sku", help="one SKU (default: every SKU of the tenant or holder in the period)")
        if name == "assign":
            a.add_argument("--to", required=True, help="the tenant that pays, or central")
        a.add_argument("--reason", required=True)
        a.add_argument("--by", required=True, help="who decides")
        a.set_defaults(func=lambda s, args, n=name: _decide(s, args, args.to if n == "assign" else "suspense"))
