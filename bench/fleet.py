"""Fleet-scale benchmark: ``python -m gpuledger.bench.fleet --gpus 1024 --hours 24 --cadence-s 10 --workers 1,2``.

1. Generates a fleet (``bench/fleet_gen.py``: nodes of 8 H100s, DCGM scrapes with jitter,
   PodResources on each node's own clock, pod and namespace watch events, the inventory)
   straight into fresh topics on the broker (started under the settings' home when none
   answers), and writes the truth the plan gives to ``OUT/truth.json``.
2. Raw loop: the fastest plain confluent-kafka consumer over the DCGM topic (batched
   ``consume``, large fetches), Avro-decoding every record and counting device samples;
   seconds, rates and the process's CPU time over wall time.
3. For each N of ``--workers``: ``gpuledger process --until-caught-up --workers N`` with a
   fresh ``GPULEDGER_HOME``; wall time, CPU time and peak RSS of every process of its session
   (``/proc`` polled every 0.5 s, VmHWM per pid), then showback checked against the truth and
   the facts compared with the first run's (``bench/fleet_facts.py``: counts and a digest).
   ``--modes together,apart`` also runs each N with the workers apart from the sink: the
   workers to the end of the sources alone, then the sink alone (``bench/fleet_runs.py``).
4. ``--replay K,..``: the period replayed with K processes each, the ledger hash the same for
   every K; ``--live-minutes M``: a live run for freshness p50/p99 (``bench/fleet_runs.py``).

A markdown row per run goes to stdout, with the machine and the exact command; everything
also to ``OUT/results.json``. Topics are deleted at the end unless ``--keep-topics``;
``--reuse OUT/truth.json`` runs steps 2-3 again on topics a ``--keep-topics`` run left.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import fastavro
import orjson
from confluent_kafka import Consumer, TopicPartition, libversion
from confluent_kafka.admin import AdminClient

from gpuledger.bench.fleet_facts import fact_digest
from gpuledger.bench.fleet_gen import check_rendering, fleet_plan, fleet_truth, publish_fleet
from gpuledger.bench.proc_monitor import BROKER_PID, log, timed_process
from gpuledger.config import load_settings
from gpuledger.domain.dcgm import parse_exposition
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.security import client_config
from gpuledger.schemas.registry import latest_version, load_schema
from gpuledger.stack import KafkaBroker
from gpuledger.bus.topics import Topics, ensure_topics, read_extents

def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem_kb = int(next(ln.split()[1] for ln in meminfo if ln.startswith("MemTotal")))
    return (f"{model} ({platform.machine()}), {os.cpu_count()} cores, {mem_kb / 2**20:.1f} GiB RAM, "
            f"Python {platform.python_version()}, librdkafka {libversion()[0]}")


# -- 2. the raw loop ---------------------------------------------------------------------
# Tried on 1,024 GPUs x 24 h (14 GB of expositions, lz4): 1 MB or 4 MB per partition and fetch leave the
# loop waiting on librdkafka's fetcher (40-60 % CPU, 2x slower); 8 MB with a 1 GB queue keeps it busy.
RAW_CONSUMER = {"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False,
                "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
                "receive.message.max.bytes": 53_000_000, "queued.max.messages.kbytes": 1_048_576,
                "queued.min.messages": 1_000_000, "fetch.wait.max.ms": 10, "fetch.min.bytes": 1,
                "check.crcs": False, "log_level": 3}
SM_TYPE, SM_LINE = "# TYPE DCGM_FI_PROF_SM_ACTIVE ", "\nDCGM_FI_PROF_SM_ACTIVE{"  # a line per device sample


def device_samples(text: str) -> int:
    """SM-active series of one exposition, counted in that family's section only (a fifth of the text)."""
    start = text.rfind(SM_TYPE)
    if start < 0:
        return 0
    end = text.find("\n#", start + len(SM_TYPE))
    return text.count(SM_LINE, start, len(text) if end < 0 else end)


def raw_loop(bootstrap: str, topic: str, client: dict | None = None, parse: bool = False) -> dict:
    """Consume and Avro-decode every record of the topic; count device samples. ``parse``: and
    parse each exposition as a worker does (domain/dcgm.py ``parse_exposition``, a node's last
    scrape as its template), counting the samples it gives: the part of a worker's work that no
    attribution removes, its floor."""
    extents = read_extents(bootstrap, [topic], client=client)
    expected = sum(high - low for low, high in extents.values())
    version = latest_version("dcgm_scrape")
    header, schema = bytes([0]) + version.to_bytes(4, "big"), load_schema("dcgm_scrape", version)
    consumer = raw_consumer(bootstrap, client, extents, "fleet-raw")
    reader, seen, samples, bytes_in, clock = fastavro.schemaless_reader, 0, 0, 0, {}
    for batch in consume_batches(consumer, expected, "raw loop", clock):
        for msg in batch:
            value = msg.value()
            if msg.error() or value[:5] != header:
                raise RuntimeError(f"raw loop: {msg.error() or 'a record not framed as dcgm_scrape v%d' % version}")
            buf = io.BytesIO(value)
            buf.seek(5)
            r = reader(buf, schema, None)
            samples += (len(parse_exposition(r["exposition"], (r["cluster_id"], r["node"])).samples) if parse
                        else device_samples(r["exposition"]))
            bytes_in += len(value)
        seen += len(batch)
    wall, cpu, main = (time.perf_counter() - clock["wall"], time.process_time() - clock["cpu"],
                       time.thread_time() - clock["main"])
    consumer.close()
    return {"records": seen, "device_samples": samples, "seconds": round(wall, 2), "records_per_s": round(seen / wall),
            "samples_per_s": round(samples / wall), "mb_per_s": round(bytes_in / wall / 1e6, 1),
            "cpu_pct": round(100 * cpu / wall), "main_thread_cpu_s": round(main, 2),  # the loop's own Python work
            "samples_per_main_thread_cpu_s": round(samples / main), "process_peak_rss_gib": peak_rss_gib()}


def raw_consumer(bootstrap: str, client: dict | None, extents: dict[str, tuple[int, int]], group: str) -> Consumer:
    """The raw loop's consumer (a group of its own, ``group`` and the time), assigned every
    partition of ``extents`` ("topic:partition" -> (low, high)) from its low offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **(client or {}), "group.id": f"{group}-{time.time_ns()}",
                         **RAW_CONSUMER})
    consumer.assign([TopicPartition(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1]), low)
                     for k, (low, _) in extents.items()])
    return consumer


def consume_batches(consumer: Consumer, expected: int, what: str, clock: dict):
    """The consumer's batches (up to 10,000 records each) until ``expected`` records came.
    ``clock`` is set to the process CPU, wall and main-thread clocks at the first batch (a
    loop is timed from there: connecting and the first fetch are not its rate). Raises when
    60 s pass without a record."""
    seen, idle_since = 0, time.monotonic()
    clock.update(cpu=time.process_time(), wall=time.perf_counter(), main=time.thread_time())
    while seen < expected:
        batch = consumer.consume(num_messages=10_000, timeout=1.0)
        if not batch:
            if time.monotonic() - idle_since > 60:
                raise RuntimeError(f"{what}: nothing for 60 s after {seen} of {expected} records")
            continue
        if not seen:
            clock.update(cpu=time.process_time(), wall=time.perf_counter(), main=time.thread_time())
        idle_since = time.monotonic()
        seen += len(batch)
        yield batch


def peak_rss_gib() -> float:
    """This process's peak RSS so far (generation and the raw loop run in it, in that order)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


# -- 3. worker runs ------------------------------------------------------------------------
def process_supports_workers(gpuledger: list[str]) -> bool:
    done = subprocess.run([*gpuledger, "process", "--help"], capture_output=True, text=True, timeout=120)
    return "--workers" in done.stdout


def home_env(env: dict, home: Path, **extra: str) -> dict:
    """``env`` for a run whose home is ``home``: its settings there, its embedded engine under it."""
    return {**env, "GPULEDGER_HOME": str(home), "GPULEDGER_CLICKHOUSE_DSN": f"chdb://{home / 'clickhouse'}", **extra}


def worker_run(n: int, gpuledger: list[str], env: dict, home: Path, timeout_s: float, with_flag: bool) -> dict:
    home.mkdir(parents=True)
    cmd = [*gpuledger, "process", "--until-caught-up", *(["--workers", str(n)] if with_flag else [])]
    return {"workers": n, **timed_process(f"workers={n}", cmd, home_env(env, home), home / "process.log", timeout_s),
            "home": str(home)}


def check_showback(gpuledger: list[str], env: dict, home: Path, truth: dict) -> dict:
    """Showback of the run against the truth (``compare_showback``)."""
    done = subprocess.run([*gpuledger, "showback", "--from", truth["from"], "--to", truth["to"], "--format", "json"],
                          env=home_env(env, home), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        return {"ok": False, "error": done.stderr[-2000:]}
    return compare_showback({e["tenant_id"]: e for e in orjson.loads(done.stdout)["tenants"]}, truth)


def compare_showback(got: dict[str, dict], truth: dict) -> dict:
    """The showback's tenants (tenant_id -> its entry) against the truth: allocated hours exact
    (1e-6 h); active hours within 0.5 % plus what the edges of the tenant's pods may move (a
    scrape interval at each: the sample before a pod's start or end stands for time on both
    sides of it; a truth without edge slack, from before it had one: two intervals over the
    period). A tenant the showback lists without hours (a namespace whose pods never held a
    GPU: a fleet too small to place one of each tenant) is neither missing nor extra; one with
    hours the truth does not have is."""
    alloc, active = truth["allocated_gpu_hours"], truth["active_gpu_hours"]
    period_rule = 2 * truth["cadence_s"] / (truth["hours"] * 3600)
    slack = truth.get("active_edge_slack_gpu_hours") or {t: period_rule * h for t, h in active.items()}
    held = {t for t, e in got.items() if e.get("allocated_gpu_hours", 0.0) > 1e-9 or e.get("active_gpu_hours", 0.0) > 1e-9}
    d_alloc = max((abs(got.get(t, {}).get("allocated_gpu_hours", 0.0) - alloc[t]) for t in alloc), default=0.0)
    # tenant -> (active hours off, allowed off, truth); reported: the tenant nearest its limit (or most past it)
    off = {t: (abs(got.get(t, {}).get("active_gpu_hours", 0.0) - want), 0.005 * want + slack.get(t, 0.0), want)
           for t, want in active.items()}
    worst = max(off, key=lambda t: off[t][0] - off[t][1], default=None)
    diff, limit, want = off[worst] if worst is not None else (0.0, 0.0, 0.0)
    d_active, allowed = (diff / want, limit / want) if want else (0.0 if diff <= 1e-9 else math.inf, 0.0)
    over = sorted(t for t, (d, lim, _) in off.items() if d > lim + 1e-12)
    cover = min((got[t]["telemetry_coverage"] for t in alloc if t in got), default=0.0)
    return {"ok": bool(alloc) and held <= set(alloc) and d_alloc <= 1e-6 and not over,
            "allocated_max_abs_diff_h": d_alloc, "active_max_rel_diff": round(d_active, 6),
            "active_allowed_rel_diff": round(allowed, 6), "active_worst_tenant": worst, "active_over": over,
            "min_coverage": round(cover, 4), "tenants_seen": sorted(held), "tenants_extra": sorted(held - set(alloc))}


def clear_prefix(admin: AdminClient, prefix: str, keep: set[str]) -> None:
    """Delete the prefix's topics (but ``keep``) and consumer groups: between runs, what an
    earlier run left (fact, state and dead-letter topics, offsets), so each run starts cold."""
    mine = lambda name: name.startswith((f"{prefix}.", f"{prefix}-"))  # noqa: E731
    names = [n for n in admin.list_topics(timeout=30).topics if mine(n) and n not in keep]
    groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid if mine(g.group_id)]
    for fut in [*(admin.delete_topics(names, request_timeout=60).values() if names else ()),
                *(admin.delete_consumer_groups(groups, request_timeout=30).values() if groups else ())]:
        try:
            fut.result()
        except Exception as exc:  # noqa: BLE001 — reported; the run shows what it found
            log(f"fleet: deleting under {prefix}: {exc}")
    deadline = time.monotonic() + 60
    while set(names) & set(admin.list_topics(timeout=30).topics) and time.monotonic() < deadline:
        time.sleep(0.5)
    if names or groups:
        log(f"fleet: deleted {len(names)} topic(s) and {len(groups)} consumer group(s) under {prefix}")


def same_facts(a: dict | None, b: dict | None) -> bool:
    """The same facts (counts and digests after FINAL); rows stored twice are reported apart."""
    def strip(d: dict | None) -> dict | None:
        return {t: (v.get("facts"), v.get("digest")) for t, v in d.items()} if d and "error" not in d else None
    return strip(a) is not None and strip(a) == strip(b)


# -- the run -------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpuledger.bench.fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1024, help="GPUs (a multiple of 8: nodes of 8 H100s)")
    p.add_argument("--hours", type=float, default=24)
    p.add_argument("--cadence-s", type=float, default=10, help="DCGM scrape interval")
    p.add_argument("--pr-cadence-s", type=float, help="PodResources interval (default: the DCGM one, own clock)")
    p.add_argument("--jitter", type=float, default=0.1, help="scrape jitter, a fraction of the interval (< 0.5)")
    p.add_argument("--missing", type=float, default=0.0, help="fraction of scrapes lost")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--start", default="2026-10-01T00:00:00Z", help="start of the period (RFC 3339)")
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts to run")
    p.add_argument("--modes", default="together", help="together (`process --workers N`: the sink beside the "
                   "workers), apart (the workers to the end of the sources, then the sink alone), or both")
    p.add_argument("--partitions", type=int, help="partitions per source topic (default: the settings')")
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: GPULEDGER_KAFKA_BOOTSTRAP)")
    p.add_argument("--out", help="folder for truth.json, results.json and the runs' homes")
    p.add_argument("--keep-topics", action="store_true", help="leave the generated topics on the broker")
    p.add_argument("--skip-worker", action="store_true", help="generate and run the raw loop only")
    p.add_argument("--skip-raw", action="store_true", help="no raw loop")
    p.add_argument("--raw-parse", action="store_true", help="after the raw loop, the raw loop that also parses "
                   "each exposition as a worker does: its floor on the same topic")
    p.add_argument("--reuse", metavar="TRUTH_JSON", help="no generation: the topics a --keep-topics run left")
    p.add_argument("--worker-timeout-s", type=float, default=4 * 3600)
    p.add_argument("--replay", default="", help="comma-separated replay process counts, after the worker runs")
    p.add_argument("--live-minutes", type=float, default=0, help="then a live run this long: freshness p50/p99")
    p.add_argument("--live-workers", type=int, default=2, help="workers of the live run")
    args = p.parse_args(argv)
    if not 0 <= args.jitter < 0.5:
        p.error("--jitter must be in [0, 0.5)")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or set(args.modes) - {"together", "apart"}:
        p.error("--modes takes together, apart or both (comma-separated)")
    if args.raw_parse and args.skip_raw:
        p.error("--raw-parse runs the raw loop again with the parse: leave out --skip-raw")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the run's processes and topics are cleaned up
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "gpuledger.bench.fleet", *sys.argv[1:]])
    base = load_settings(kafka_bootstrap=args.bootstrap, source_partitions=args.partitions)
    if args.reuse:
        truth = orjson.loads(Path(args.reuse).read_bytes())
        prefix, out = truth["topic_prefix"], Path(args.reuse).parent
    else:
        prefix = f"fleet{args.gpus}g{int(time.time())}"
        out = Path(args.out or f"/tmp/gpuledger-fleet/{prefix}")
    out.mkdir(parents=True, exist_ok=True)
    s = load_settings(kafka_bootstrap=base.kafka_bootstrap, source_partitions=base.source_partitions,
                      topic_prefix=prefix)
    topics = Topics(prefix, s.source_partitions, s.audit_retention_days)
    log(f"fleet: machine {machine()}\nfleet: {command}")
    client = client_config(s)
    broker = KafkaBroker(s.home, s.kafka_bootstrap, s.kafka_libs, s.kafka_heap_opts, client=client)
    broker.up(progress=log)
    BROKER_PID[0] = broker._pid()
    results: dict = {"machine": machine(), "command": command, "topic_prefix": prefix}
    # kept: its futures resolve only while it lives
    admin = AdminClient({"bootstrap.servers": s.kafka_bootstrap, **client})
    try:
        if not args.reuse:
            ensure_topics(s.kafka_bootstrap, topics, client=client)
            started = time.monotonic()
            plan = fleet_plan(args.gpus, args.hours, args.cadence_s, args.pr_cadence_s or args.cadence_s, args.jitter,
                              args.missing, args.seed, parse_rfc3339_ms(args.start))
            check_rendering(plan)
            truth = {**fleet_truth(plan), "topic_prefix": prefix, "gpus": args.gpus, "hours": args.hours,
                     "nodes": len(plan.nodes), "cadence_s": args.cadence_s,
                     "pr_cadence_s": args.pr_cadence_s or args.cadence_s, "jitter": args.jitter,
                     "missing": args.missing, "seed": args.seed, "partitions": s.source_partitions,
                     "from": format_rfc3339(plan.start_ms), "to": format_rfc3339(plan.end_ms)}
            log(f"fleet: generating {args.gpus} GPUs on {len(plan.nodes)} nodes, {args.hours:g} h, {len(plan.pods)} "
                f"pods, into topics {prefix}.* ({s.source_partitions} partitions each)")
            counts = publish_fleet(plan, KafkaPublisher(s.kafka_bootstrap, client=client), topics, log)
            truth.update(counts, generate_s=round(time.monotonic() - started, 2), generate_peak_rss_gib=peak_rss_gib())
            (out / "truth.json").write_bytes(orjson.dumps(truth, option=orjson.OPT_INDENT_2))
            log(f"fleet: generated in {truth['generate_s']} s ({counts['device_samples'] / truth['generate_s']:.0f} "
                f"device samples/s, {counts['dcgm_bytes'] / 1e9:.2f} GB of DCGM records, peak RSS "
                f"{truth['generate_peak_rss_gib']} GiB); truth in {out / 'truth.json'}")
        results["generation"] = truth
        samples = truth["device_samples"]
        raw = None
        if not args.skip_raw:
            log("fleet: raw loop (confluent-kafka consume + Avro decode of the DCGM topic)")
            raw = results["raw"] = raw_loop(s.kafka_bootstrap, topics.dcgm.name, client)
            log(f"fleet: raw loop {raw}")
            if raw["device_samples"] != samples:
                log(f"fleet: raw loop counted {raw['device_samples']} device samples, the generator {samples}")
            if args.raw_parse:
                log("fleet: raw loop + exposition parse (a worker's parse, nothing else)")
                floor = results["raw_parse"] = raw_loop(s.kafka_bootstrap, topics.dcgm.name, client, parse=True)
                log(f"fleet: raw loop + parse {floor}")
        runs = results["runs"] = []
        if not args.skip_worker:
            gpuledger = [str(Path(sys.executable).with_name("gpuledger"))]
            with_flag = process_supports_workers(gpuledger)
            env = {**os.environ, "GPULEDGER_KAFKA_BOOTSTRAP": s.kafka_bootstrap, "GPULEDGER_TOPIC_PREFIX": prefix,
                   "GPULEDGER_SOURCE_PARTITIONS": str(s.source_partitions),
                   "GPULEDGER_KAFKA_LIBS": str(s.kafka_libs.resolve())}
            sources = {t.name for t in (topics.k8s, topics.podresources, topics.dcgm, topics.vgpu, topics.requests,
                                        topics.reference)}
            from gpuledger.bench.fleet_runs import apart_run, live_run, replay_runs
            for n, mode in ((int(x), m) for x in args.workers.split(",") if x.strip() for m in args.modes):
                if not with_flag and (n != 1 or mode == "apart"):
                    log(f"workers={n} {mode}: skipped: this `gpuledger process` has no --workers flag yet "
                        "(N=1 together runs without it)")
                    continue
                clear_prefix(admin, prefix, sources)
                home = out / f"run-w{n}-{mode}-{int(time.time())}"
                run = (apart_run(n, gpuledger, env, home, args.worker_timeout_s) if mode == "apart" else
                       worker_run(n, gpuledger, env, home, args.worker_timeout_s, with_flag))
                if run["exit"] == 0:
                    run["check"] = check_showback(gpuledger, env, Path(run["home"]), truth)
                    log(f"workers={n}: check against the truth: {run['check']}")
                    run["facts"] = fact_digest(Path(run["home"]))
                    log(f"workers={n}: facts {run['facts']}")
                runs.append(run)
            ks = [int(x) for x in args.replay.split(",") if x.strip()]
            if ks and runs and runs[-1]["exit"] == 0:
                results["replay"] = replay_runs(ks, gpuledger, env, Path(runs[-1]["home"]), truth["from"][:7],
                                                args.worker_timeout_s)
            if args.live_minutes:
                results["live"] = live_run(args.live_workers, args.gpus, args.live_minutes, args.cadence_s,
                                           args.pr_cadence_s or args.cadence_s, args.jitter, args.seed, s, client,
                                           admin, gpuledger, env, out)
    finally:
        if not args.keep_topics:
            clear_prefix(admin, prefix, set())
    (out / "results.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"Machine: {results['machine']}\nCommand: `{command}`\n")
    print("| GPUs | hours | device samples | workers | wall s | samples/s | raw / run | peak RSS per process (max) "
          "| CPU | check |\n|---|---|---|---|---|---|---|---|---|---|")
    gpus, hours = truth["gpus"], truth["hours"]
    if raw:
        print(f"| {gpus} | {hours:g} | {samples} | raw loop | {raw['seconds']} | {raw['samples_per_s']} | 1.0x | - "
              f"| {raw['cpu_pct']} % | - |")
    if floor := results.get("raw_parse"):
        print(f"| {gpus} | {hours:g} | {samples} | raw loop + parse | {floor['seconds']} | {floor['samples_per_s']} "
              f"| {raw['samples_per_s'] / floor['samples_per_s']:.2f}x | - | {floor['cpu_pct']} % "
              f"| {floor['device_samples']} samples parsed |")
    first = next((r["facts"] for r in runs if "facts" in r), None)
    for r in runs:
        if "facts" in r:  # fact for fact against the first run; rows stored twice by at-least-once delivery
            twice = sum(t["rows_stored"] - t["facts"] for t in r["facts"].values()) if "error" not in r["facts"] else "?"
            same = "=" if same_facts(r["facts"], first) else "≠"
            r["check"]["facts"] = f"facts {same} first run, {twice} rows twice"
        rate = samples / r["wall_s"]
        ratio = f"{raw['samples_per_s'] / rate:.1f}x" if raw else "-"
        check = r.get("check", {})
        verdict = (f"exit {r['exit']}" if r["exit"] else "showback failed" if "error" in check else
                   f"{'ok' if check['ok'] else 'MISMATCH'}: allocated Δ {check['allocated_max_abs_diff_h']:.2g} h, "
                   f"active Δ {100 * check['active_max_rel_diff']:.2f} % "
                   f"(≤ {100 * check['active_allowed_rel_diff']:.2f}), "
                   f"{len(check['tenants_seen'])}/{len(truth['tenants'])} tenants"
                   f"{' + ' + ', '.join(check['tenants_extra']) + ' not in the truth' if check.get('tenants_extra') else ''}"
                   f"; {check.get('facts', '')}")
        if r.get("apart"):
            verdict += (f"; then the sink alone {r['sink_wall_s']} s, {r['sink_cpu_s']} CPU s, "
                        f"{r['sink_peak_rss_gib']} GiB" if "sink_wall_s" in r else "")
        print(f"| {gpus} | {hours:g} | {samples} | {r['workers']}{' apart' if r.get('apart') else ''} | {r['wall_s']} "
              f"| {rate:.0f} | {ratio} | {r['peak_rss_gib']} GiB ({r['processes']} proc.) | {r['cpu_pct']} % | {verdict} |")
    for r in results.get("replay", []):
        print(f"| {gpus} | {hours:g} | {samples} | replay K={r['replay_processes']} | {r['wall_s']} "
              f"| {samples / r['wall_s']:.0f} | - | {r['peak_rss_gib']} GiB ({r['processes']} proc.) | {r['cpu_pct']} % | exit {r['exit']}, "
              f"{r.get('records', '?')} records, hash {str(r.get('hash', '?'))[7:19]}, "
              f"{'same for every K' if r['same_hash_as_every_k'] else 'DIFFERS'} |")
    if live := results.get("live"):
        print(f"\nLive, {live['gpus']} GPUs, {live['workers']} workers, {live['minutes']:g} min: freshness of "
              f"{live['utilization_facts']} utilization facts p50 {live['p50_s']} s, p99 {live['p99_s']} s")
    print(f"\nResults: {out / 'results.json'}")
    replays_ok = all(r["exit"] == 0 and r["same_hash_as_every_k"] for r in results.get("replay", []))
    runs_ok = all(r["exit"] == 0 and r.get("check", {}).get("ok") and same_facts(r.get("facts"), first) for r in runs)
    return 0 if replays_ok and runs_ok else 1


if __name__ == "__main__":
    sys.exit(main())
