"""What every producer of a polled HTTP ``/metrics`` source shares (dcgm-exporter, model
servers): scrape at each grid tick, check the body with the engine's own parser, put one
capture line and flush it, count and say what failed.

A subclass names its ``source``, capture ``FILE``, ``what`` it scrapes and the ``kind`` of
server, and gives
``check(text)`` (why the body is not that source's scrape, or None) and ``line(tick_ms,
text)``. A failure (unreachable, timeout, HTTP error, a body the check refuses, a sink that
did not deliver) is counted under its reason, said once per distinct problem on stderr with
the URL and what to check, and retried at the next tick: the loop never stops on it. There
is no resume state: a scrape is a snapshot, and a missed tick is not fetched later.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.lines import LineSink
from gpuledger.producers.runtime import ProducerMetrics, poll_on_grid
from gpuledger.producers.scrape_http import ScrapeError, fetch_text

__all__ = ["GridScrapeProducer"]


class GridScrapeProducer:
    source = ""
    FILE = ""
    what = ""  # what the URL should be, as the messages name it
    kind = ""  # what answers it ("dcgm-exporter", "model server")

    def __init__(self, url: str, interval_s: float, metrics: ProducerMetrics, timeout_s: float = 5.0) -> None:
        self.url, self.interval_s, self.timeout_s, self.metrics = url, interval_s, timeout_s, metrics
        self._last_problem: str | None = None

    def check(self, text: str) -> str | None:
        raise NotImplementedError

    def line(self, tick_ms: int, text: str) -> dict:
        raise NotImplementedError

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Scrape at each grid tick until ``stop`` is set. Never raises for a failed scrape."""
        poll_on_grid(lambda tick_ms: self.scrape(sink, tick_ms, now_ms), self.interval_s, now_ms, stop)

    def scrape(self, sink: LineSink, tick_ms: int, now_ms: Callable[[], int]) -> bool:
        """One scrape stamped ``tick_ms``: put and flush its line. Returns whether it was published."""
        try:
            text = fetch_text(self.url, self.timeout_s, self.what)
            problem = self.check(text)
            if problem is not None:
                raise ScrapeError("unparseable", f"{self.url} answered a body that is not a {self.kind} scrape "
                                                 f"({problem}); not published: check that the URL is {self.what}")
        except ScrapeError as exc:
            self._problem(exc.reason, str(exc))
            return False
        try:
            sink.put(self.FILE, self.line(tick_ms, text))
            sink.flush()
        except Exception as exc:  # the sink (the broker) failed: this tick is lost, the next one retries
            self._problem("sink", f"{self.source} scrape of {self.url} at {format_rfc3339(tick_ms)} not delivered "
                                  f"({type(exc).__name__}: {exc}): check the broker")
            return False
        self.metrics.sent(self.FILE)
        self.metrics.observed(tick_ms, now_ms())
        if self._last_problem is not None:
            _say(f"{self.source}: {self.url} scraped again")
            self._last_problem = None
        return True

    def _problem(self, reason: str, message: str) -> None:
        self.metrics.error(reason)
        if message != self._last_problem:  # said once per distinct problem, not at every tick
            _say(f"{self.source}: {message}")
            self._last_problem = message


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
