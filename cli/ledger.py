"""The ledger's commands: ``close`` (prepare, then ``--approve``), ``ledger show|corrections``,
``export focus``, ``statement``, ``replay`` and ``diff`` (ledger/, replay/)."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from gpuledger.cli.common import UsageError, progress, wall_ms as _wall_ms
from gpuledger.config import Settings

__all__ = ["add_parsers"]


def _ledger_engine(s: Settings):
    """The engine itself: closing writes, so it may not go through a running worker."""
    from gpuledger.sinks.clickhouse import ClickHouseStore, EngineLockedError
    from gpuledger.sinks.query import WorkerQueryClient, open_reader

    reader = open_reader(s.home, s.effective_dsn())
    if isinstance(reader, WorkerQueryClient):
        raise EngineLockedError("a running `gpuledger process` owns the embedded ClickHouse; the ledger needs the "
                                "settled engine: stop it, or run `gpuledger process --until-caught-up` and close after")
    assert isinstance(reader, ClickHouseStore)
    return reader


def _period(args) -> str:
    from gpuledger.ledger.close import period_window

    if not args.period:
        raise UsageError("give --period YYYY-MM")
    try:
        period_window(args.period)
    except ValueError as exc:
        raise UsageError(f"--period: {exc}") from exc
    return args.period


def _closed(s: Settings, period: str, store=None) -> dict:
    from gpuledger.sinks.ledger_store import ClickHouseLedger

    doc = ClickHouseLedger(store or _ledger_engine(s)).get(period)
    if doc is None:
        raise UsageError(f"{period} is not closed: run `gpuledger close --period {period}` first")
    return doc


def cmd_close(s: Settings, args) -> int:
    from gpuledger.domain.ledger import ClosePolicy
    from gpuledger.domain.suspense import billing_classes
    from gpuledger.ledger.close import ApprovalError, approve_period, prepare_period
    from gpuledger.sinks.ledger_store import ClickHouseLedger
    from gpuledger.sinks.progress import job_checkpoint

    period = _period(args)
    store = _ledger_engine(s)
    if args.approve:
        if not args.by:
            raise UsageError("--approve needs --by NAME: who approves the prepared period")
        try:
            result = approve_period(ClickHouseLedger(store), period, args.by, _wall_ms(),
                                    s.close_require_distinct_approver, progress)
        except ApprovalError as exc:
            progress(f"close {period}: approval refused: {exc}")
            print(f"refused: {exc}")
            return 2
    else:
        policy = ClosePolicy(s.close_max_unattributed_ratio, s.close_max_difference_ratio,
                             s.close_max_unpriced_gpu_hours, s.close_max_outside_inventory_gpu_hours,
                             billing_classes(s.close_bill_confidence.split(","), s.close_telemetry_unknown,
                                             s.close_unattributed))
        try:
            from gpuledger.bus.security import client_config
            from gpuledger.bus.topics import topics_for
            from gpuledger.ledger.source_versions import kafka_edges

            edges = kafka_edges({"bootstrap.servers": s.kafka_bootstrap, **client_config(s)})
            result = prepare_period(store, ClickHouseLedger(store), job_checkpoint(store), period, policy,
                                    args.by or _login_name(), _wall_ms(), progress, edges, topics_for(s).dcgm.name)
        except ApprovalError as exc:
            raise UsageError(f"--by: {exc}") from exc
    if result.already_closed:
        progress(f"close {period}: already closed; the ledger is unchanged")
        print(result.document["hash"])
        return 0
    if result.reasons:
        progress(f"close {period}: refused:\n" + "\n".join(f"  - {r}" for r in result.reasons))
        print("\n".join(f"refused: {r}" for r in result.reasons))
        return 2
    if not args.approve:
        progress(f"close {period}: prepared; another person closes it with "
                 f"`gpuledger close --period {period} --approve --by NAME`")
    print(orjson.dumps(result.document, option=orjson.OPT_INDENT_2).decode())
    return 0


def _login_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError) as exc:
        raise UsageError("no login name to record as the preparer: give --by NAME") from exc


def cmd_ledger(s: Settings, args) -> int:
    from gpuledger.domain.ledger import line_doc
    from gpuledger.ledger.close import pending_corrections
    from gpuledger.sinks.ledger_store import ClickHouseLedger

    if args.action == "show":
        print(orjson.dumps(_closed(s, _period(args)), option=orjson.OPT_INDENT_2).decode())
        return 0
    store = _ledger_engine(s)
    lines = pending_corrections(store, ClickHouseLedger(store).closed())
    print(orjson.dumps([line_doc(ln) for ln in lines], option=orjson.OPT_INDENT_2).decode())
    return 0


def _write(text: str, out: str | None) -> None:
    if out:
        Path(out).write_text(text, encoding="utf-8")
        progress(f"wrote {out}")
    else:
        sys.stdout.write(text)


def cmd_export(s: Settings, args) -> int:
    from gpuledger.ledger.focus import focus_csv

    _write(focus_csv(_closed(s, _period(args)), s.provider_name, s.central_account), args.out)
    return 0


def _statement_daily(store, doc: dict, tenant: str) -> list[dict]:
    """The tenant's days of a closed period, from the facts (for a period closed before the
    document kept them)."""
    from gpuledger.domain.daily import daily_series
    from gpuledger.domain.ledger import billing_policy
    from gpuledger.domain.rows import price_rows
    from gpuledger.ledger.close import period_window
    from gpuledger.sinks.showback_sql import read_showback_rows

    rows = read_showback_rows(store, *period_window(doc["period"]), billing_policy(doc))
    return daily_series(rows, price_rows(rows), [tenant])[tenant]


def cmd_statement(s: Settings, args) -> int:
    from gpuledger.ledger.statement import StatementError, render_statement

    try:
        period = _period(args)
        store = _ledger_engine(s)
        doc = _closed(s, period, store)
        mine = next((t for t in doc["tenants"] if t["tenant_id"] == args.tenant), None)
        daily = None if mine is None else (  # closed with its days (hashed), or drawn from the facts now
            [{k: v if k == "day" or v is None else float(v) for k, v in d.items()} for d in mine["daily"]]
            if "daily" in mine else _statement_daily(store, doc, args.tenant))
        _write(render_statement(doc, args.tenant, daily), args.out)
    except StatementError as exc:
        raise UsageError(str(exc)) from exc
    return 0


def cmd_replay(s: Settings, args) -> int:
    from gpuledger.replay.run import ReplayError, replay_period

    from gpuledger.sinks.ledger_store import ClickHouseLedger

    period = _period(args)
    store = _ledger_engine(s)
    try:
        result = replay_period(s, store, period, args.into, args.at_close, progress, processes=args.processes)
    except ReplayError as exc:
        raise UsageError(f"--into {exc}") from exc
    closed = ClickHouseLedger(store).get(period)
    print(orjson.dumps({"period": period, "into": args.into, "hash": result.document["hash"],
                        "closed_hash": closed["hash"] if closed else None,
                        "same_hash": bool(closed) and closed["hash"] == result.document["hash"],
                        "records": result.records, "dead_lettered": result.dead_lettered,
                        "seconds": round(result.seconds, 3)}, option=orjson.OPT_INDENT_2).decode())
    return 0


def cmd_diff(s: Settings, args) -> int:
    from gpuledger.replay.diff import diff_ledgers, render_diff
    from gpuledger.replay.run import ReplayError, check_shadow_name
    from gpuledger.sinks.ledger_store import ClickHouseLedger

    period = _period(args)
    store = _ledger_engine(s)
    closed = ClickHouseLedger(store).closed()
    mine = next((d for d in closed if d["period"] == period), None)
    if mine is None:
        raise UsageError(f"{period} is not closed: there is no ledger to compare with")
    try:
        check_shadow_name(args.against)
    except ReplayError as exc:
        raise UsageError(f"--against {exc}") from exc
    replayed = ClickHouseLedger(store.sibling(args.against)).get(period)
    if replayed is None:
        raise UsageError(f"no replay of {period} in {args.against!r}: run `gpuledger replay --period {period} "
                         f"--into {args.against}` first")
    lines = diff_ledgers(closed, period, replayed)
    same = "same hash" if replayed["hash"] == mine["hash"] else "hashes differ"
    if not lines:
        progress(f"diff {period}: the replay equals the ledger plus its corrections ({same})")
        return 0
    progress(f"diff {period}: {len(lines)} line(s) differ ({same})")
    print(orjson.dumps(lines, option=orjson.OPT_INDENT_2).decode() if args.format == "json" else render_diff(lines))
    return 1


def add_parsers(sub) -> None:
    cl = sub.add_parser("close", help="prepare a period's ledger document (refuses with reasons); --approve closes "
                                      "it into the immutable ledger")
    cl.add_argument("--period", required=True, help="YYYY-MM")
    cl.add_argument("--approve", action="store_true", help="close the prepared document (needs --by)")
    cl.add_argument("--by", help="who prepares (default: the login name) or approves")
    cl.set_defaults(func=cmd_close)
    lg = sub.add_parser("ledger", help="show a closed period, or the corrections later evidence makes")
    lg.add_argument("action", choices=["show", "corrections"])
    lg.add_argument("--period", help="YYYY-MM (show)")
    lg.add_argument("--format", choices=["json"], default="json")
    lg.set_defaults(func=cmd_ledger)
    ex = sub.add_parser("export", help="export a closed period")
    ex.add_argument("kind", choices=["focus"])
    ex.add_argument("--period", required=True, help="YYYY-MM")
    ex.add_argument("--out", help="file to write (default stdout)")
    ex.set_defaults(func=cmd_export)
    stm = sub.add_parser("statement", help="a tenant's printable HTML statement of a closed period")
    stm.add_argument("--period", required=True, help="YYYY-MM")
    stm.add_argument("--tenant", required=True)
    stm.add_argument("--out", help="file to write (default stdout)")
    stm.set_defaults(func=cmd_statement)
    rp = sub.add_parser("replay", help="rebuild a period from the source topics into a shadow database")
    rp.add_argument("--period", required=True, help="YYYY-MM")
    rp.add_argument("--into", required=True, help="name of the shadow database")
    rp.add_argument("--at-close", action="store_true", help="stop where the closed ledger's sources stopped")
    rp.add_argument("--processes", type=int, default=1, help="replay workers, each over a disjoint set of units")
    rp.set_defaults(func=cmd_replay)
    df = sub.add_parser("diff", help="a replay against the closed ledger plus its corrections (exit 1 if different)")
    df.add_argument("--period", required=True, help="YYYY-MM")
    df.add_argument("--against", required=True, help="the shadow database a replay wrote")
    df.add_argument("--format", choices=["table", "json"], default="table")
    df.set_defaults(func=cmd_diff)
