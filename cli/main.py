"""``gpuledger``: one console script, a subcommand per job.

Parse -> settings (flags over ``GPULEDGER_*`` over defaults) -> run. Exit 0 on success,
2 on bad input (with the reason), 1 on failure. Progress goes to stderr, data to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson
from pydantic import ValidationError

from gpuledger.cli.common import UsageError, emit, progress, stacks_on_sigusr1, wall_ms as _wall_ms
from gpuledger.cli.produce import UsageError as ProduceUsageError
from gpuledger.config import Settings, load_settings
from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["main"]


def period_bounds(period: str) -> tuple[int, int]:
    try:
        year, month = (int(x) for x in period.split("-"))
        if not 1 <= month <= 12:
            raise ValueError
    except ValueError as exc:
        raise UsageError(f"--period must be YYYY-MM, got {period!r}") from exc
    nxt = (year + 1, 1) if month == 12 else (year, month + 1)
    return (parse_rfc3339_ms(f"{year:04d}-{month:02d}-01T00:00:00Z"),
            parse_rfc3339_ms(f"{nxt[0]:04d}-{nxt[1]:02d}-01T00:00:00Z"))


# -- commands -------------------------------------------------------------------------
def cmd_stack(s: Settings, args) -> int:
    from gpuledger.stack import KafkaBroker
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for

    mechanism = (args.sasl_mechanism or s.kafka_sasl_mechanism) if args.secure else None
    broker = KafkaBroker(s.home, s.kafka_bootstrap, s.kafka_libs, s.kafka_heap_opts, mechanism, client_config(s))
    if args.action == "down":
        st = broker.down()
        progress(f"kafka: {st.detail}")
        return 0
    if args.action == "status":
        st = broker.status()
        print(orjson.dumps({"kafka": vars(st), "clickhouse_dsn": s.shown_dsn()}, option=orjson.OPT_INDENT_2).decode())
        return 0 if st.reachable else 1
    st = broker.up(progress=progress)
    created = ensure_topics(s.kafka_bootstrap, topics_for(s), client=broker.client_config())
    if created:
        progress(f"kafka: created topics {', '.join(created)}")
    from gpuledger.sinks.query import open_reader

    open_reader(s.home, s.effective_dsn())  # creates the ClickHouse schema when no worker owns it
    progress(f"kafka: {st.detail} at {st.bootstrap} (pid {st.pid}); clickhouse: {s.shown_dsn()}")
    if broker.secure.exists():
        env = broker.secure.client_env_file
        progress(f"kafka: listener {broker.listener}; clients take their settings from {env}: "
                 f"`set -a; . {env}; set +a`")
    return 0


def cmd_ingest(s: Settings, args) -> int:
    from gpuledger.producers.capture import ingest_capture
    from gpuledger.bus.publisher import KafkaPublisher
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for

    topics, client = topics_for(s), client_config(s)
    ensure_topics(s.kafka_bootstrap, topics, client=client)
    summary = ingest_capture(Path(args.dir), KafkaPublisher(s.kafka_bootstrap, client=client), topics, _wall_ms,
                             progress, max_future_ms=int(s.max_future_skew_s * 1000))
    print(summary.render())
    return 0


def cmd_load(s: Settings, args) -> int:
    from gpuledger.domain.timeutil import format_rfc3339
    from gpuledger.producers.capture import load_reference
    from gpuledger.bus.publisher import KafkaPublisher
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for

    topics, client = topics_for(s), client_config(s)
    ensure_topics(s.kafka_bootstrap, topics, client=client)
    if args.kind == "suspense" and (why := _suspense_rewrite(s, args)):
        progress(f"load: suspense for cluster {args.cluster} refused, nothing published: {why}")
        return 2
    ts = load_reference(Path(args.file), args.kind, args.cluster, KafkaPublisher(s.kafka_bootstrap, client=client),
                        topics, _wall_ms)
    progress(f"load: {args.kind} for cluster {args.cluster} published (effective from {format_rfc3339(ts)}); "
             "`gpuledger process` applies it")
    return 0


def _suspense_rewrite(s: Settings, args) -> str | None:
    """Why the decision list in ``args.file`` may not replace the recorded one (decisions are
    append-only), or None; a file that does not parse is left to ``load_reference`` to refuse."""
    import orjson

    from gpuledger.cli.suspense import append_only_refusal, recorded_decisions
    from gpuledger.domain.suspense import parse_assignments

    try:
        proposed = parse_assignments(orjson.loads(Path(args.file).read_bytes()))
    except (OSError, ValueError):
        return None
    return append_only_refusal(recorded_decisions(s, args.cluster), proposed)


def cmd_process(s: Settings, args) -> int:
    from gpuledger.streams.supervisor import run_process

    return run_process(s, args.until_caught_up, s.workers if args.workers is None else args.workers, progress,
                       _wall_ms)


def cmd_worker(s: Settings, args) -> int:
    import signal

    from gpuledger.streams.runtime import WorkerJob, run_worker
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for

    topics = topics_for(s)
    group = f"{s.topic_prefix}-process"
    stop_offsets = None
    if args.job:
        topics, group = topics.job(args.job), f"{s.topic_prefix}-job-{args.job}"
        if args.stop_offsets:
            stop_offsets = orjson.loads(Path(args.stop_offsets).read_bytes())
    ensure_topics(s.kafka_bootstrap, topics, client=client_config(s))
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(1))
    job = WorkerJob(topics, group, args.until_caught_up, stop_offsets)
    try:
        return run_worker(s, job, progress, _wall_ms, lambda: bool(stopping))
    finally:  # done and committed: a SIGTERM arriving while Python shuts down must not turn exit 0 into -15
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)


def cmd_sink(s: Settings, args) -> int:
    import signal
    import threading

    from gpuledger.sinks.clickhouse import ClickHouseStore
    from gpuledger.streams.supervisor import run_sink
    from gpuledger.bus.security import client_config
    from gpuledger.bus.topics import ensure_topics, topics_for

    topics = topics_for(s)
    ensure_topics(s.kafka_bootstrap, topics, client=client_config(s))
    store = ClickHouseStore(s.effective_dsn())
    store.ensure_schema()
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(1))
    try:
        return run_sink(s, topics, store, f"{s.topic_prefix}-sink", progress, _wall_ms, lambda: bool(stopping),
                        threading.Lock(), None, False)
    finally:
        store.close()


def _window(args) -> tuple[int, int]:
    if args.period:
        return period_bounds(args.period)
    if args.from_ and args.to:
        try:
            return parse_rfc3339_ms(args.from_), parse_rfc3339_ms(args.to)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    raise UsageError("give --period YYYY-MM, or --from T --to T (RFC 3339)")


def cmd_showback(s: Settings, args) -> int:
    from gpuledger.domain.showback import build_showback, render_csv, render_table
    from gpuledger.sinks.query import open_reader
    from gpuledger.sinks.showback_sql import read_showback_rows
    from gpuledger.domain.suspense import billing_classes

    from_ms, to_ms = _window(args)
    bill = billing_classes(s.close_bill_confidence.split(","), s.close_telemetry_unknown, s.close_unattributed)
    doc = build_showback(read_showback_rows(open_reader(s.home, s.effective_dsn()), from_ms, to_ms, bill),
                         args.tenant)
    emit(args.format, doc, lambda: render_csv(doc), lambda: render_table(doc))
    return 0


def cmd_demo(s: Settings, args) -> int:
    from gpuledger.demo.run import run_demo

    return run_demo(s, Path(args.out) if args.out else None, args.hours, progress,
                    lambda argv, settings: main(argv, settings=settings))


def cmd_config(s: Settings, args) -> int:
    print(orjson.dumps(s.model_dump(mode="json"), option=orjson.OPT_INDENT_2).decode())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from gpuledger.cli import forecast, inventory, ledger, ops, produce, suspense

    p = argparse.ArgumentParser(prog="gpuledger", description="Who used the GPU: attribution from real sources.")
    p.add_argument("--home", help="local state folder (GPULEDGER_HOME, default ./.gpuledger)")
    p.add_argument("--bootstrap", help="Kafka bootstrap (GPULEDGER_KAFKA_BOOTSTRAP, default 127.0.0.1:9092)")
    p.add_argument("--dsn", help="ClickHouse DSN (GPULEDGER_CLICKHOUSE_DSN, default chdb://HOME/clickhouse)")
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser("stack", help="start/stop/report the local Kafka broker; create topics and tables")
    st.add_argument("action", choices=["up", "down", "status"])
    st.add_argument("--secure", action="store_true",
                    help="a new home's broker listens with SASL over TLS (a CA, certificate and random passwords made "
                         "for it; client settings in HOME/kafka/secure/client.env)")
    st.add_argument("--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                    help="with --secure (default GPULEDGER_KAFKA_SASL_MECHANISM, SCRAM-SHA-512)")
    st.set_defaults(func=cmd_stack)
    ing = sub.add_parser("ingest", help="publish a capture directory to the source topics")
    ing.add_argument("dir")
    ing.set_defaults(func=cmd_ingest)
    ld = sub.add_parser("load", help="publish one reference document (rate cards, quotas, credits, inventory)")
    ld.add_argument("kind", choices=["ratecards", "quotas", "credits", "inventory", "endpoints", "suspense", "throughput"])
    ld.add_argument("file")
    ld.add_argument("--cluster", required=True, help="the cluster_id the document applies to")
    ld.set_defaults(func=cmd_load)
    pr = sub.add_parser("process", help="run the stream processors and sinks")
    pr.add_argument("--until-caught-up", action="store_true", help="exit 0 once all input up to now is in ClickHouse")
    pr.add_argument("--workers", type=int, help="attribution workers to run (default GPULEDGER_WORKERS, 1; 0: the sink alone, "
                    "with workers run apart as `gpuledger worker`; with --until-caught-up it exits once the "
                    "fact topics, as they stand, are in ClickHouse)")
    pr.set_defaults(func=cmd_process)
    wk = sub.add_parser("worker", help="one attribution worker of the consumer group (facts to the fact topics)")
    wk.add_argument("--until-caught-up", action="store_true", help="exit 0 once every source partition is read")
    wk.add_argument("--job", help="a replay job's name: its own group, fact and state topics")
    wk.add_argument("--stop-offsets", help="JSON file: topic:partition -> offset to stop before (with --job)")
    wk.set_defaults(func=cmd_worker)
    sk = sub.add_parser("sink", help="write the fact topics into ClickHouse (a ClickHouse server: run several)")
    sk.set_defaults(func=cmd_sink)
    sb = sub.add_parser("showback", help="real-time (provisional) showback from ClickHouse")
    sb.add_argument("--period")
    sb.add_argument("--from", dest="from_")
    sb.add_argument("--to")
    sb.add_argument("--tenant")
    sb.add_argument("--format", choices=["table", "json", "csv"], default="table")
    sb.set_defaults(func=cmd_showback)
    ledger.add_parsers(sub)
    dm = sub.add_parser("demo", help="stack up, generate a realistic cluster capture, ingest, process, showback")
    dm.add_argument("--out", help="where to write the capture (default HOME/demo-capture)")
    dm.add_argument("--hours", type=int, default=24)
    dm.set_defaults(func=cmd_demo)
    produce.add_parsers(sub)
    ops.add_parsers(sub)
    suspense.add_parsers(sub)
    forecast.add_parsers(sub)
    inventory.add_parsers(sub)
    cf = sub.add_parser("config", help="print the effective settings (validates them)")
    cf.add_argument("action", choices=["validate"])
    cf.set_defaults(func=cmd_config)
    return p


def main(argv: list[str] | None = None, settings: Settings | None = None) -> int:
    args = build_parser().parse_args(argv)
    stacks_on_sigusr1()
    try:
        overrides = args.overrides(args) if hasattr(args, "overrides") else {}
        s = settings or load_settings(home=args.home, kafka_bootstrap=args.bootstrap, clickhouse_dsn=args.dsn,
                                      **overrides)
        return args.func(s, args)
    except ValidationError as exc:
        progress(f"gpuledger: bad settings: {exc}")
        return 2
    except UsageError as exc:
        progress(f"gpuledger: {exc}")
        return 2
    except ProduceUsageError as exc:
        progress(f"gpuledger: {exc}")
        return 2
    except Exception as exc:  # noqa: BLE001 — the CLI edge: name the failure, exit 1
        from gpuledger.producers.capture import CaptureError
        from gpuledger.sinks.base import StoreError
        from gpuledger.stack import StackError

        if isinstance(exc, CaptureError):
            progress(f"gpuledger: {exc}")
            return 2
        if isinstance(exc, (StackError, StoreError)):
            progress(f"gpuledger: {exc}")
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
