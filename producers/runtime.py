"""What every live producer shares: its metrics, its resume state, its polling loop.

- ``ProducerMetrics``: records sent, errors, and lag behind the source, on a registry of its
  own, served over HTTP for Prometheus (``serve``).
- ``StateFile``: the producer's resume position (a watch's resourceVersion, a log's byte
  offset), written atomically and only after the sink's ``flush`` (write, then commit).
- ``poll_on_grid``: calls a poll function at every multiple of the interval of the clock,
  passing that instant, so every producer of a fleet stamps the same instants.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from gpuledger.config.metrics_http import serve_metrics
from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["Deadline", "ProducerMetrics", "StateFile", "poll_on_grid"]


class _Families:
    """The metric families of one registry (several producers of one process share them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.records = Counter("gpuledger_producer_records_total", "Records handed to the sink, by capture file.",
                               ["source", "file"], registry=registry)
        self.errors = Counter("gpuledger_producer_errors_total", "Failed reads of the source, by reason.",
                              ["source", "reason"], registry=registry)
        self.lag = Gauge("gpuledger_producer_lag_seconds",
                         "Now minus the event time of the newest observation read from the source.",
                         ["source"], registry=registry)
        self.last_success = Gauge("gpuledger_producer_last_success_timestamp_seconds",
                                  "When the source was last read successfully (unix seconds).",
                                  ["source"], registry=registry)
        self.clock_offset = Gauge("gpuledger_producer_clock_offset_seconds",
                                  "Broker clock minus this host's clock, as last measured.",
                                  ["source"], registry=registry)


_FAMILIES: dict[int, tuple[CollectorRegistry, _Families]] = {}
_FAMILIES_LOCK = threading.Lock()


class ProducerMetrics:
    """Prometheus metrics of one producer (label ``source``: k8s, dcgm, ...); producers
    given the same registry share one /metrics."""

    def __init__(self, source: str, registry: CollectorRegistry | None = None) -> None:
        self.source = source
        self.registry = registry or CollectorRegistry()
        with _FAMILIES_LOCK:
            entry = _FAMILIES.get(id(self.registry))
            if entry is None or entry[0] is not self.registry:
                entry = _FAMILIES[id(self.registry)] = (self.registry, _Families(self.registry))
        f = entry[1]
        self.records, self.errors, self.lag, self.last_success, self.clock_offset = (
            f.records, f.errors, f.lag, f.last_success, f.clock_offset)

    def sent(self, file: str, n: int = 1) -> None:
        self.records.labels(self.source, file).inc(n)

    def error(self, reason: str) -> None:
        self.errors.labels(self.source, reason).inc()

    def observed(self, newest_ms: int, now_ms: int) -> None:
        """The source was read at ``now_ms``; its newest observation is ``newest_ms``. The lag
        gauge is computed when scraped, so a source gone quiet shows a growing lag."""
        host_offset_ms = now_ms - time.time() * 1000  # the producer's clock may be corrected
        self.lag.labels(self.source).set_function(
            lambda: max(0.0, time.time() * 1000 + host_offset_ms - newest_ms) / 1000)
        self.last_success.labels(self.source).set(now_ms / 1000)

    def serve(self, port: int, addr: str = "127.0.0.1", token: str | None = None) -> int:
        """Serve /metrics on ``port`` (0 = any free port); returns the port."""
        return serve_metrics(self.registry, port, addr, token).server_address[1]


class StateFile:
    """A small JSON document replaced atomically (write a temporary file, fsync, rename)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict:
        try:
            return orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{self.path} is not JSON ({exc}): delete it to start over from the source") from exc

    def save(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as fh:
            fh.write(orjson.dumps(state))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


class Deadline(threading.Event):
    """A stop event that may also bound the grid: polls at ticks in ``[from_ms, until_ms)`` only
    (``gpuledger produce --from/--until``, ``capture --for``)."""

    def __init__(self, from_ms: int | None = None, until_ms: int | None = None) -> None:
        super().__init__()
        self.from_ms, self.until_ms = from_ms, until_ms


def poll_on_grid(poll: Callable[[int], None], interval_s: float, now_ms: Callable[[], int],
                 stop: threading.Event, until_ms: int | None = None) -> int:
    """Call ``poll(tick_ms)`` at each multiple of ``interval_s`` of ``now_ms``'s clock until
    ``stop`` is set or ``until_ms`` is reached (exclusive). Returns the number of polls.
    A tick missed (a poll slower than the interval) is skipped, not run late."""
    step = max(1, int(round(interval_s * 1000)))
    polls = 0
    if until_ms is None:
        until_ms = getattr(stop, "until_ms", None)
    tick = (now_ms() // step + 1) * step
    from_ms = getattr(stop, "from_ms", None)
    if from_ms is not None and tick < from_ms:
        tick = -(-from_ms // step) * step
    while not stop.is_set() and (until_ms is None or tick < until_ms):
        wait_ms = tick - now_ms()
        if wait_ms > 0 and stop.wait(wait_ms / 1000):
            break
        poll(tick)
        polls += 1
        tick = max(tick + step, (now_ms() // step + 1) * step)
    return polls
