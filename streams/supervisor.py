"""``gpuledger process``: the sink and N attribution workers, on one machine.

The embedded engine (chdb) can be opened by one process only, so this process runs the sink
(sinks/fact_consumer.py), owns the engine and serves its queries (``POST /query`` on
127.0.0.1, announced in ``HOME/process.json``); the workers (streams/runtime.py) run as child
processes of one consumer group, each with its own memory and CPU, and die with this process.
With a ClickHouse server the same parts run apart: ``gpuledger worker`` (scale it out) and
``gpuledger sink``.

``--until-caught-up``: the workers exit once every source partition is read to where it
ended when they started; the sink then writes the fact topics to their ends and exits 0.
With ``--workers 0`` (the workers run apart, or have already run) it writes the fact topics
to their ends as they stand when it starts, then exits 0.
A worker that fails stops the whole process (exit 1): nothing unwritten was committed, so
starting again resumes where the changelogs stand.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from pydantic import SecretStr

from gpuledger.config import Settings
from gpuledger.bus.dead_letter import DeadLetters
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.security import client_config
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.fact_consumer import SinkLoop, SinkStopped
from gpuledger.sinks.failpoint import OutageStore
from gpuledger.sinks.freshness import FreshnessCollector
from gpuledger.sinks.query import TOKEN_FILE, announce, query_token
from gpuledger.sinks.query_server import QueryServer, read_limits
from gpuledger.streams.collector import collect_for_the_data_path
from gpuledger.streams.metrics import WorkerMetrics
from gpuledger.bus.topics import Topics, ensure_topics, topics_for

__all__ = ["child_env", "run_process", "run_sink", "spawn_workers"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def child_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that gives a child process the same settings as this one (secrets included:
    the child needs them, e.g. the Kafka SASL password)."""
    env = dict(os.environ)
    for name in type(settings).model_fields:
        key = f"GPULEDGER_{name.upper()}"
        value = getattr(settings, name)
        if value is None:
            env.pop(key, None)
        elif isinstance(value, SecretStr):
            env[key] = value.get_secret_value()
        elif isinstance(value, (tuple, list, dict)):
            env[key] = orjson.dumps(value).decode()
        elif isinstance(value, bool):
            env[key] = "true" if value else "false"
        else:
            env[key] = str(value)
    env.update(extra)
    return env


def spawn_workers(settings: Settings, n: int, args: list[str], progress: Callable[[str], None]) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        extra = {}
        if settings.worker_metrics_port > 0:
            extra["GPULEDGER_WORKER_METRICS_PORT"] = str(settings.worker_metrics_port + i)
        procs.append(subprocess.Popen([sys.executable, "-m", "gpuledger", "worker", *args],
                                      env=child_env(settings, **extra), preexec_fn=_die_with_parent))
    progress(f"process: {n} worker(s) started (pids {', '.join(str(p.pid) for p in procs)})")
    return procs


def run_sink(settings: Settings, topics: Topics, store, group: str, progress: Callable[[str], None],
             wall_ms: Callable[[], int], should_stop: Callable[[], bool], lock: threading.Lock,
             workers: list[subprocess.Popen] | None, until_caught_up: bool,
             reference_stops: dict[str, int] | None = None) -> int:
    """The sink loop; with ``workers``, until they exit (then drain when caught up). A replay
    passes ``reference_stops``: reference documents at or past them are not taken."""
    collect_for_the_data_path()
    metrics = WorkerMetrics()
    if settings.sink_metrics_port >= 0:
        port = metrics.serve(settings.sink_metrics_port, settings.metrics_addr, settings.metrics_secret())
        progress(f"sink: metrics at http://{settings.metrics_addr}:{port}/metrics")
    client = client_config(settings)
    publisher = KafkaPublisher(settings.kafka_bootstrap, client=client)
    dead = DeadLetters(publisher, topics.dead_letter.name, wall_ms)
    sink = SinkLoop(settings.kafka_bootstrap, topics, store, group, metrics.counting_dead_letters(dead.send),
                    dead.flush, progress, lock, should_stop, settings.sink_batch_records, metrics.store_error,
                    client=client, reference_stops=reference_stops)
    metrics.registry.register(FreshnessCollector(sink.freshness))
    last = 0.0
    try:
        while True:
            sink.step()
            if time.monotonic() - last >= 2.0:
                last = time.monotonic()
                w = sink.written
                progress(f"sink: {w['capacity']} capacity + {w['utilization']} utilization + {w['requests']} request "
                         f"+ {w['demand']} demand facts written")
            if should_stop():
                return 0
            if workers is None:
                continue
            codes = [p.poll() for p in workers]
            failed = [(p.pid, c) for p, c in zip(workers, codes) if c not in (None, 0)]
            if failed:
                progress(f"process: worker(s) failed ({', '.join(f'pid {pid} exit {c}' for pid, c in failed)}); "
                         "stopping. Nothing unwritten was committed: starting again resumes from the changelogs")
                return 1
            if all(c == 0 for c in codes):
                if not until_caught_up:
                    progress("process: the workers stopped")
                    return 1
                sink.drain(sink.ends())
                w = sink.written
                progress(f"sink: {w['capacity']} capacity + {w['utilization']} utilization + {w['requests']} request "
                         f"+ {w['demand']} demand facts written; caught up")
                return 0
    except SinkStopped as exc:
        progress(str(exc))
        return 1
    finally:
        progress(sink.freshness.summary())
        sink.close()


def run_process(settings: Settings, until_caught_up: bool, workers: int, progress: Callable[[str], None],
                wall_ms: Callable[[], int]) -> int:
    topics = topics_for(settings)
    ensure_topics(settings.kafka_bootstrap, topics, client=client_config(settings))
    store = ClickHouseStore(settings.effective_dsn())
    store.ensure_schema()
    if settings.failpoint_drop_table:  # fault injection for the fault suite: a table gone under the running sink
        store.command(f"DROP TABLE IF EXISTS {store.db}.{settings.failpoint_drop_table}")
    if settings.failpoint_store_outage:  # fault injection for the fault suite: writes refused for a while
        after_s, for_s, *after_writes = settings.failpoint_store_outage
        store = OutageStore(store, after_s, for_s, time.monotonic, *after_writes)
    lock = threading.Lock()
    token = query_token(settings.query_token.get_secret_value() if settings.query_token else None)
    reader = ClickHouseStore(settings.effective_dsn(), settings=read_limits(
        settings.query_max_execution_s, settings.query_max_memory_bytes, settings.query_max_result_rows))
    server = QueryServer(reader, lock, token, settings.query_port, settings.query_addr,
                         settings.query_max_body_bytes).start()
    host = settings.query_addr if ":" not in settings.query_addr else f"[{settings.query_addr}]"
    marker = announce(Path(settings.home), f"http://{host}:{server.port}/query", settings.effective_dsn(), token)
    stopping = threading.Event()
    procs: list[subprocess.Popen] = []

    def on_signal(signum, _frame) -> None:
        stopping.set()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        procs += spawn_workers(settings, workers, ["--until-caught-up"] if until_caught_up else [], progress)

        def should_stop() -> bool:  # asked to stop: once the workers are gone, the sink stops too
            return stopping.is_set() and all(p.poll() is not None for p in procs)
        # no workers and --until-caught-up: the sink alone drains the fact topics to their end now, then exits
        code = run_sink(settings, topics, store, f"{settings.topic_prefix}-sink", progress, wall_ms, should_stop,
                        lock, procs if procs or until_caught_up else None, until_caught_up)
        if stopping.is_set():
            codes = [p.wait() for p in procs]
            code = code or next((c for c in codes if c), 0)
            if until_caught_up and not code:
                progress("process: stopped before catching up; starting again resumes where it stopped")
                code = 1
        return code
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for sig, handler in old.items():
            signal.signal(sig, handler)
        marker.unlink(missing_ok=True)
        (marker.parent / TOKEN_FILE).unlink(missing_ok=True)
        server.stop()
        reader.close()
        store.close()
