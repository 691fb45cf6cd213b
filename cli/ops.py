"""``gpuledger metrics``: the fleet gauges for Prometheus, read from ClickHouse.

Capacity held with no tenant, allocated but idle, GPUs gone quiet, inference queue times,
borrowed against guaranteed: the series the alert rules in ``deploy/prometheus/rules`` read.
"""

from __future__ import annotations

import signal
import sys
import threading

from gpuledger.config import Settings

__all__ = ["add_parsers"]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_metrics(s: Settings, args) -> int:
    from gpuledger.sinks.fleet_metrics import serve_fleet_metrics

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return serve_fleet_metrics(s, args.port, args.interval, stop, _progress, window_s=args.window)


def add_parsers(sub) -> None:
    m = sub.add_parser("metrics", help="serve the fleet gauges (from ClickHouse) for Prometheus")
    m.add_argument("--port", type=int, default=9103, help="port of /metrics (0 = any free port; default 9103)")
    m.add_argument("--interval", type=float, default=60.0, help="seconds between refreshes (default 60)")
    m.add_argument("--window", type=float, default=900.0, help="seconds of event time the gauges average (default 900)")
    m.set_defaults(func=cmd_metrics)
