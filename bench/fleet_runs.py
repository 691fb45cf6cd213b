"""The fleet bench's workers-apart, replay and live runs (``--modes ..,apart``, ``--replay K,..``
and ``--live-minutes M``).

- **Workers apart** from the sink: ``N`` ``gpuledger worker --until-caught-up`` read the
  sources to their end with no sink running (the facts wait in the fact topics), then
  ``gpuledger process --workers 0 --until-caught-up`` (the sink alone) writes them. On a
  machine of few cores a sink beside the workers takes the cores a second worker would use;
  apart, the workers' wall is what adding a worker changes, and the sink's is its own.

- **Replay**: ``gpuledger replay --period P --into fleet_replay_kK --processes K`` for each K,
  in the home of the bench's last worker run (its store holds the main facts; the shadow
  databases are new). Wall time, CPU and peak RSS per process, the records read, and the
  ledger hash, which must be the same for every K.
- **Live freshness**: fresh topics under their own prefix; ``gpuledger process --workers N``
  runs live (no ``--until-caught-up``); the same generator then publishes a fleet whose period
  starts now, each record once the wall clock reaches its event time, as live producers
  would. After ``M`` minutes and a tail for the last windows to close, the process is stopped
  and its sink's freshness line (sinks/freshness.py: every stored utilization fact's
  ``observed_at -> stored``, p50 and p99) is read from its log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import orjson

from gpuledger.bench.fleet import clear_prefix, home_env
from gpuledger.bench.proc_monitor import log, start_monitored, timed_process
from gpuledger.bench.fleet_gen import fleet_plan, publish_fleet
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.topics import Topics, ensure_topics

__all__ = ["apart_run", "live_run", "replay_runs"]

# N workers of one group in one session (the harness's monitor counts each), exit 1 if any fails
WORKERS = ('pids=""; i=0; while [ "$i" -lt "$1" ]; do "$0" worker --until-caught-up & pids="$pids $!"; '
           'i=$((i + 1)); done; rc=0; for p in $pids; do wait "$p" || rc=1; done; exit "$rc"')

FRESHNESS = re.compile(r"sink: freshness of (\d+) utilization facts .*?p50 ([\d.]+) s, p99 ([\d.]+) s, "
                       r"max (\S+ ?[\d.]*) s")


def apart_run(n: int, gpuledger: list[str], env: dict, home: Path, timeout_s: float) -> dict:
    """The workers to the end of the sources, then the sink alone: ``wall_s`` is the workers'
    (``sink_wall_s`` the sink's after them); CPU and peak RSS per process of both."""
    home.mkdir(parents=True)
    run_env = home_env(env, home)
    workers = timed_process(f"workers={n} apart", ["sh", "-c", WORKERS, gpuledger[0], str(n)], run_env,
                            home / "workers.log", timeout_s)
    run = {**workers, "workers": n, "apart": True, "home": str(home)}
    if workers["exit"] == 0:
        sink = timed_process(f"workers={n} apart: the sink alone", [*gpuledger, "process", "--workers", "0",
                                                                    "--until-caught-up"],
                             run_env, home / "sink.log", timeout_s)
        run.update(exit=sink["exit"], sink_wall_s=sink["wall_s"], sink_cpu_s=sink["cpu_s"],
                   sink_broker_cpu_s=sink["broker_cpu_s"], sink_peak_rss_gib=sink["peak_rss_gib"])
    log(f"workers={n} apart: {run}")
    return run


def replay_runs(ks: list[int], gpuledger: list[str], env: dict, home: Path, period: str,
                timeout_s: float) -> list[dict]:
    run_env = home_env(env, home)
    runs = []
    for k in ks:
        out = home / f"replay-k{k}.json"
        out.unlink(missing_ok=True)
        cmd = [*gpuledger, "replay", "--period", period, "--into", f"fleet_replay_k{k}", "--processes", str(k)]
        run = timed_process(f"replay K={k}", cmd, run_env, home / f"replay-k{k}.log", timeout_s, out)
        run["replay_processes"] = k
        if run["exit"] == 0:
            doc = orjson.loads(out.read_bytes())
            run.update(hash=doc["hash"], records=doc["records"], dead_lettered=doc["dead_lettered"],
                       seconds_inside=doc["seconds"])
        log(f"replay K={k}: {run}")
        runs.append(run)
    hashes = {r.get("hash") for r in runs}
    for r in runs:
        r["same_hash_as_every_k"] = len(hashes) == 1 and None not in hashes
    return runs


def live_run(n: int, gpus: int, minutes: float, cadence_s: float, pr_cadence_s: float, jitter: float, seed: int,
             settings, client: dict, admin, gpuledger: list[str], env: dict, out: Path, tail_s: float = 150.0) -> dict:
    prefix = f"live{gpus}g{int(time.time())}"
    topics = Topics(prefix, settings.source_partitions, settings.audit_retention_days)
    ensure_topics(settings.kafka_bootstrap, topics, client=client)
    home = out / f"live-w{n}-{int(time.time())}"
    home.mkdir(parents=True)
    run_env = home_env(env, home, GPULEDGER_TOPIC_PREFIX=prefix)
    log_path = home / "process.log"
    cmd = [*gpuledger, "process", "--workers", str(n)]
    log(f"live: {' '.join(cmd)} on topics {prefix}.* (log {log_path})")
    proc, monitor = start_monitored(cmd, run_env, log_path)
    result: dict = {"workers": n, "gpus": gpus, "minutes": minutes, "cadence_s": cadence_s, "home": str(home),
                    "topic_prefix": prefix}
    try:
        deadline = time.monotonic() + 180
        while log_path.read_bytes().count(b"worker: holds units") < n:  # every worker joined the group
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"live: the process did not start its {n} worker(s); see {log_path}")
            time.sleep(0.5)
        start_ms = (int(time.time()) + 5) * 1000
        plan = fleet_plan(gpus, minutes / 60, cadence_s, pr_cadence_s, jitter, 0.0, seed, start_ms)
        log(f"live: publishing {gpus} GPUs in real time for {minutes:g} min from {start_ms}")
        counts = publish_fleet(plan, KafkaPublisher(settings.kafka_bootstrap, client=client), topics, log, live=True)
        result["published"] = counts
        log(f"live: published; {tail_s:.0f} s for the last windows to close")
        time.sleep(tail_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        monitor.done.set()
        monitor.join()
        clear_prefix(admin, prefix, set())
    text = log_path.read_text(errors="replace")
    found = FRESHNESS.findall(text)
    if not found:
        raise RuntimeError(f"live: no freshness line in {log_path}")
    facts, p50, p99, worst = found[-1]
    result.update(utilization_facts=int(facts), p50_s=float(p50), p99_s=float(p99), max_s=worst,
                  peak_rss_by_process=monitor.peak_rss_gib())
    log(f"live: {result}")
    return result


