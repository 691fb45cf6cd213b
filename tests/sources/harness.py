"""What the producer tests share: the clock, waiting for a condition, a producer run on a
thread, and reading a producer's metrics."""

from __future__ import annotations

import threading
import time

from gpuledger.producers.runtime import ProducerMetrics

__all__ = ["Running", "errors", "wait_for", "wall_ms"]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_for(condition, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def errors(metrics: ProducerMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("gpuledger_producer_errors_total",
                                             {"source": metrics.source, "reason": reason}) or 0.0


class Running:
    """A producer's run() on a thread, stopped on exit."""

    def __init__(self, producer, sink) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=producer.run, args=(sink, self.stop, wall_ms), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
