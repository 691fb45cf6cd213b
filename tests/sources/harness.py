"""What the producer tests share: the clock, waiting for a condition, a producer run on a
thread, and reading a producer's metrics."""

from __future__ import annotations

import threading
import time

from gpuledger.producers.runtime import ProducerMetrics

__all__ = ["FIXED_MS", "Running", "errors", "fixed_ms", "metric", "wait_for", "wall_ms"]

FIXED_MS = 1_790_000_000_123  # a clock that stands still: what a producer stamps is known exactly


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def fixed_ms() -> int:
    return FIXED_MS


def wait_for(condition, what: str = "the condition", timeout_s: float = 15.0, interval_s: float = 0.02):
    """Poll ``condition`` until it returns something true, and return that; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def metric(metrics: ProducerMetrics, name: str, **labels) -> float:
    """A producer metric's value (0 where it has no sample yet)."""
    return metrics.registry.get_sample_value(name, {"source": metrics.source, **labels}) or 0.0


def errors(metrics: ProducerMetrics, reason: str) -> float:
    return metric(metrics, "gpuledger_producer_errors_total", reason=reason)


class Running:
    """A producer's run() on a thread, stopped on exit (and it must stop in ``stop_timeout_s``)."""

    def __init__(self, producer, sink, clock=wall_ms, stop_timeout_s: float = 10.0) -> None:
        self.stop = threading.Event()
        self.stop_timeout_s = stop_timeout_s
        self.thread = threading.Thread(target=producer.run, args=(sink, self.stop, clock), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(self.stop_timeout_s)
        assert not self.thread.is_alive(), "the producer did not stop"
