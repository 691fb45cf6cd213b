"""``gpuledger inventory reconcile``: the GPUs the evidence shows in a window (DCGM's device
list from the health facts, the GPUs PodResources and vGPU snapshots handed out) against the
GPUs the inventory approves (sinks/health_sql.py), as a table or JSON. Exit 0 when they
agree, 1 with the findings otherwise (the GpuInventoryMismatch alert reads the same query)."""

from __future__ import annotations

import orjson

from gpuledger.config import Settings

__all__ = ["add_parsers"]


def cmd_reconcile(s: Settings, args) -> int:
    from gpuledger.cli.main import _window
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.sinks.health_sql import inventory_reconciliation_sql
    from gpuledger.sinks.query import open_reader

    from_ms, to_ms = _window(args)
    reader = open_reader(s.home, s.effective_dsn())
    rows = reader.query(inventory_reconciliation_sql(reader.db), {"from_ms": from_ms, "to_ms": to_ms})[1]
    findings = [{"cluster_id": c, "gpu_uuid": g, "node": n, "finding": f, "sources": src.split(",") if src else []}
                for c, g, n, f, src in rows]
    if args.format == "json":
        print(orjson.dumps({"format": "gpuledger-inventory-reconciliation/1", "from": format_rfc3339(from_ms),
                            "to": format_rfc3339(to_ms), "findings": findings}, option=orjson.OPT_INDENT_2).decode())
    else:
        print(f"inventory reconciliation {format_rfc3339(from_ms)} .. {format_rfc3339(to_ms)}: "
              f"{len(findings)} finding(s)")
        for x in findings:
            print(f"{x['finding']:<18}{x['cluster_id']:<16}{x['node'] or '-':<20}{x['gpu_uuid']:<44}"
                  f"{','.join(x['sources']) or '-'}")
    return 1 if findings else 0


def add_parsers(sub) -> None:
    inv = sub.add_parser("inventory", help="check the approved inventory against the evidence")
    isub = inv.add_subparsers(dest="inventory_command", required=True)
    rc = isub.add_parser("reconcile", help="GPUs in evidence but not in the inventory, and the reverse")
    rc.add_argument("--period", help="YYYY-MM")
    rc.add_argument("--from", dest="from_", help="RFC 3339 start (with --to)")
    rc.add_argument("--to", help="RFC 3339 end, exclusive")
    rc.add_argument("--format", choices=("table", "json"), default="table")
    rc.set_defaults(func=cmd_reconcile)
