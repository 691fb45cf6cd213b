"""Checks shared by the Compose and Kubernetes tests: a deployed gpuledger process is its
command line (argv after the image's ``gpuledger`` entrypoint) plus its environment; both
must be what the CLI itself accepts.

``gpuledger_process(argv, env)`` parses argv with the CLI's own parser and builds the
settings exactly as ``gpuledger.cli.main.main`` does (flags over ``GPULEDGER_*`` environment
over defaults), in an environment holding only ``env``; ``settings_env_names()`` is the set of
environment variables the settings read.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from gpuledger.cli.main import build_parser
from gpuledger.config.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[3]
ENV_PREFIX = "GPULEDGER_"
SERVES_NO_METRICS = {"sink"}  # `gpuledger sink` has no HTTP endpoint (streams/supervisor.py run_sink)


def settings_env_names() -> set[str]:
    """``GPULEDGER_<FIELD>`` for every field of the settings."""
    return {ENV_PREFIX + name.upper() for name in Settings.model_fields}


def unknown_settings(env: dict[str, str]) -> list[str]:
    """The ``GPULEDGER_*`` names in ``env`` that no setting reads (misspelt or stale)."""
    known = settings_env_names()
    return sorted(k for k in env if k.startswith(ENV_PREFIX) and k not in known)


@dataclass(frozen=True)
class GpuledgerProcess:
    """One deployed gpuledger process: what it runs and the settings it would run with."""

    where: str
    argv: list[str]
    args: object
    settings: Settings

    @property
    def command(self) -> str:
        return self.args.command

    @property
    def source(self) -> str | None:
        return getattr(self.args, "source", None)

    @property
    def metrics_port(self) -> int:
        """Where this process serves its Prometheus /metrics (-1: nowhere, 0: a random port)."""
        if self.command in SERVES_NO_METRICS:
            return -1
        if self.command in ("process", "worker"):
            return self.settings.worker_metrics_port
        if self.command == "produce":
            return self.settings.producer_metrics_port
        return getattr(self.args, "port", -1)


def parse_command(argv: list[str], where: str):
    """``argv`` parsed by gpuledger's own parser; an AssertionError with argparse's complaint
    when it is not a gpuledger command line."""
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), (
        f"{where}: the command must be a list of strings, got {argv!r}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv)
    except SystemExit:
        complaint = err.getvalue().strip().splitlines()[-1:]
        raise AssertionError(f"{where}: `gpuledger {' '.join(argv)}` is not a gpuledger command line: "
                             f"{' '.join(complaint)}") from None


def gpuledger_process(argv: list[str], env: dict[str, str], where: str) -> GpuledgerProcess:
    """Parse ``argv`` and load the settings from ``env`` alone, as ``gpuledger`` would."""
    unknown = unknown_settings(env)
    assert not unknown, (f"{where}: {', '.join(unknown)} set, but no gpuledger setting reads "
                         f"{'it' if len(unknown) == 1 else 'them'} (config/settings.py)")
    args = parse_command(argv, where)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    clean.update({k: str(v) for k, v in env.items()})
    overrides = args.overrides(args) if hasattr(args, "overrides") else {}
    try:
        with mock.patch.dict(os.environ, clean, clear=True):
            settings = load_settings(home=args.home, kafka_bootstrap=args.bootstrap, clickhouse_dsn=args.dsn,
                                     **overrides)
    except Exception as exc:  # pydantic's ValidationError, named with where it came from
        raise AssertionError(f"{where}: `gpuledger {' '.join(argv)}` would refuse its settings: {exc}") from None
    return GpuledgerProcess(where, argv, args, settings)


def check_role(proc: GpuledgerProcess) -> list[str]:
    """What a long-running deployed process needs beyond valid settings; returns the problems."""
    s, problems = proc.settings, []
    if proc.command == "worker":
        if s.clickhouse_dsn:
            problems.append(f"{proc.where}: the attribution worker never touches ClickHouse; it must not be given "
                            "a ClickHouse login (GPULEDGER_CLICKHOUSE_DSN)")
        if proc.metrics_port <= 0:
            problems.append(f"{proc.where}: the worker serves no /metrics on a fixed port "
                            "(GPULEDGER_WORKER_METRICS_PORT)")
        if getattr(proc.args, "until_caught_up", False):
            problems.append(f"{proc.where}: a deployed worker must not stop once caught up")
        if getattr(proc.args, "job", None) or getattr(proc.args, "stop_offsets", None):
            problems.append(f"{proc.where}: --job/--stop-offsets belong to a replay, not to the live worker group")
    elif proc.command == "sink":
        if not s.clickhouse_dsn.startswith(("http://", "https://")):
            problems.append(f"{proc.where}: a deployed sink must write a ClickHouse server (http DSN), "
                            f"not {s.clickhouse_dsn or 'the embedded engine'}")
    elif proc.command == "process":
        if not s.clickhouse_dsn.startswith(("http://", "https://")):
            problems.append(f"{proc.where}: the worker must reach a ClickHouse server (http DSN), "
                            f"not {s.clickhouse_dsn or 'the embedded engine'}")
        if proc.metrics_port <= 0:
            problems.append(f"{proc.where}: the worker serves no /metrics on a fixed port "
                            "(GPULEDGER_WORKER_METRICS_PORT)")
        if getattr(proc.args, "until_caught_up", False):
            problems.append(f"{proc.where}: a deployed worker must not stop once caught up")
    elif proc.command == "produce":
        if not s.cluster_id:
            problems.append(f"{proc.where}: produce needs the cluster id (GPULEDGER_CLUSTER_ID)")
        if proc.metrics_port <= 0:
            problems.append(f"{proc.where}: the producer serves no /metrics on a fixed port "
                            "(GPULEDGER_PRODUCER_METRICS_PORT)")
        if getattr(proc.args, "for_", None) or getattr(proc.args, "until", None):
            problems.append(f"{proc.where}: a deployed producer must not stop by itself (--for/--until)")
        if proc.source == "requests" and not (s.requests_listen or s.requests_log):
            problems.append(f"{proc.where}: produce requests needs --listen or --log")
        if proc.source == "requests" and s.requests_listen and s.requests_reporters is None:
            problems.append(f"{proc.where}: the request receiver needs its reporters document "
                            "(GPULEDGER_REQUESTS_REPORTERS)")
        if not s.clock_sync:
            problems.append(f"{proc.where}: a deployed producer must correct its clock to the broker's")
    elif proc.command == "metrics":
        if not s.clickhouse_dsn.startswith(("http://", "https://")):
            problems.append(f"{proc.where}: the fleet gauges must read a ClickHouse server (http DSN)")
        if proc.metrics_port <= 0:
            problems.append(f"{proc.where}: the fleet gauges must be served on a fixed port (--port)")
    else:
        problems.append(f"{proc.where}: `{proc.command}` is not a long-running process "
                        "(worker, sink, process, produce, metrics)")
    return problems
