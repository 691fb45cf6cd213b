"""``gpuledger forecast``: demand curves per capacity class, a peak forecast for a horizon
with its backtest, the service GPUs each model needs and each class's headroom
(domain/demand_forecast.py), as a table, JSON (``gpuledger-forecast/1``) or CSV; ``--save``
writes the rows into ``capacity_forecasts`` for the scheduler dashboard."""

from __future__ import annotations

import csv
import io

from gpuledger.cli.common import UsageError, emit, progress
from gpuledger.config import Settings

__all__ = ["add_parsers", "render_csv", "render_table"]

MS_PER_HOUR = 3_600_000


def render_csv(rows: list[dict]) -> str:
    from gpuledger.domain.demand_forecast import ROW_COLUMNS
    from gpuledger.domain.timeutil import format_rfc3339

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(ROW_COLUMNS)
    for r in rows:
        w.writerow([format_rfc3339(r[c]) if c == "bucket_start" else ("" if r[c] is None else r[c])
                    for c in ROW_COLUMNS])
    return out.getvalue()


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render_table(doc: dict) -> str:
    lines = [f"forecast as of {doc['as_of']}: history {doc['history']['days']:g} days, horizon {doc['horizon']['days']} days",
             f"{'class':<14}{'profile':<10}{'mode':<11}{'model':<24}{'measure':<25}{'hist peak':>10}{'fc peak':>10}"
             f"{'bt mape':>9}{'bt peak err':>12}"]
    for e in doc["series"]:
        fc, bt = e["forecast"] or {}, e["backtest"] or {}
        lines.append(f"{e['gpu_class'] or '-':<14}{e['profile'] or '-':<10}{e['mode'] or '-':<11}{e['model'] or '-':<24}"
                     f"{e['measure']:<25}{_num(e['history_peak']):>10}{_num(fc.get('peak')):>10}"
                     f"{_num(bt.get('mape_daily_peak'), 3):>9}{_num(bt.get('peak_error_ratio'), 3):>12}")
    for r in doc["required"]:
        lines.append(f"required {r['gpu_class']}/{r['profile'] or '-'}/{r['mode']} {r['model']}: "
                     f"{_num(r['peak_tokens_per_s'], 1)} tokens/s ÷ {_num(r['sustainable_tokens_per_s_per_gpu'], 1)} "
                     f"per GPU × (1 + {r['failure_reserve_ratio']:g} + {r['maintenance_reserve_ratio']:g}) = "
                     f"{_num(r['required_gpus_exact'], 3)} -> {r['required_gpus']} GPUs ({r['basis']})")
    for m in doc["missing_throughput"]:
        lines.append(f"no throughput document for {m['gpu_class']}/{m['profile'] or '-'}/{m['mode']} {m['model']}: "
                     "`gpuledger load throughput FILE` to size it")
    for h in doc["headroom"]:
        lines.append(f"headroom {h['gpu_class']}: {h['physical_gpus']} GPUs - peak {_num(h['peak_allocated_gpus'])} - "
                     f"failure domain {h['failure_domain_gpus']} - unavailable {_num(h['peak_unavailable_gpus'])} = "
                     f"{_num(h['headroom_gpus'])} ({h['basis']})")
    return "\n".join(lines)


def _window(args, reader) -> tuple[int, int]:
    """(history hours, as-of): the history ends at ``--as-of`` (default: the latest evidence),
    to the hour, and reaches back ``--weeks`` or to the first whole hour of evidence, whichever
    is later: hours before the evidence began are unknown, not demand 0."""
    from gpuledger.domain.timeutil import parse_rfc3339_ms
    from gpuledger.sinks.forecast_sql import evidence_span_ms

    span = evidence_span_ms(reader)
    if span is None:
        raise UsageError("no capacity facts to forecast from: ingest and process evidence first")
    if args.as_of:
        try:
            t = parse_rfc3339_ms(args.as_of)
        except ValueError as exc:
            raise UsageError(f"--as-of: {exc}") from exc
    else:
        t = span[1]
    as_of = t - t % MS_PER_HOUR
    hours = min(args.weeks * 7 * 24, (as_of - span[0]) // MS_PER_HOUR)
    if hours < 1:
        raise UsageError(f"no whole hour of evidence before {args.as_of or 'the latest evidence'}: nothing to forecast from")
    return hours, as_of


def cmd_forecast(s: Settings, args) -> int:
    from gpuledger.domain.demand_forecast import ForecastInputs, build_forecast, forecast_rows
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.sinks.forecast_sql import read_forecast_inputs, write_forecast_rows
    from gpuledger.sinks.query import open_reader

    if args.weeks < 1 or args.horizon_days < 1:
        raise UsageError("--weeks and --horizon-days must be at least 1")
    reader = open_reader(s.home, s.effective_dsn())
    if args.save:
        from gpuledger.cli.ledger import _ledger_engine

        reader = _ledger_engine(s)  # --save writes: the engine itself, not a running process's endpoint
    hours, as_of = _window(args, reader)
    from_ms = as_of - hours * MS_PER_HOUR
    progress(f"forecast: reading {hours / 24:g} days of demand [{format_rfc3339(from_ms)}, {format_rfc3339(as_of)})")
    points, quotas, throughput, nodes = read_forecast_inputs(reader, from_ms, as_of)
    progress(f"forecast: {len(points)} series; fitting the daily peaks ({args.horizon_days}-day horizon)")
    doc = build_forecast(ForecastInputs(as_of, hours, args.horizon_days, points, quotas, throughput, nodes))
    rows = forecast_rows(doc)
    if args.save:
        n = write_forecast_rows(reader, as_of, rows)
        progress(f"forecast: saved {n} rows to {reader.db}.capacity_forecasts (as of {doc['as_of']})")
    emit(args.format, doc, lambda: render_csv(rows), lambda: render_table(doc))
    return 0


def add_parsers(sub) -> None:
    fc = sub.add_parser("forecast", help="demand curves, peak forecast and required GPUs per capacity class")
    fc.add_argument("--weeks", type=int, default=8, help="weeks of history to read (default 8)")
    fc.add_argument("--horizon-days", type=int, default=14, help="days to forecast (default 14)")
    fc.add_argument("--as-of", help="end of the history, RFC 3339 (default: the latest evidence), to the hour")
    fc.add_argument("--format", choices=["table", "json", "csv"], default="table")
    fc.add_argument("--save", action="store_true",
                    help="write the rows into the capacity_forecasts table (the scheduler dashboard reads it)")
    fc.set_defaults(func=cmd_forecast)
