"""Scrapes dcgm-exporter's ``/metrics`` on the grid and emits ``dcgm.jsonl`` lines.

At every multiple of the scrape interval (``poll_on_grid``) the producer GETs the exporter's
``/metrics`` and puts ``{"observed_at": <the grid tick>, "node": ..., "exposition": <body,
verbatim>}``, then flushes the sink. The tick, not the moment the answer came back, is the
observation time, so every node of a fleet stamps the same instants.

A body is checked before it is published, with the parser the engine uses
(``gpuledger.domain.dcgm.parse_exposition``): a body it rejects, or one without a single
``DCGM_FI_*`` series (an HTML error page, a proxy's login form, an empty answer), is counted
as ``unparseable`` and NOT published. Such a body carries no evidence of GPU use; publishing
it would only put a dead-letter record on the topic for every tick of an outage, and the gap
it leaves is exactly what a failed scrape leaves: the engine sees no sample for that tick
either way. A scrape whose DCGM series are all blank sentinels is still published: it is a
true observation that the exporter had no values.

Failures (connection refused, timeout, an HTTP error status, an unparseable body) are counted
in ``metrics.error(reason)``, said on stderr with the URL and what to check, and retried on
the next tick; the loop never stops on them. There is no resume state: a scrape is a
snapshot, and a missed tick is not fetched later.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from gpuledger.domain.dcgm import parse_exposition
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.lines import LineSink
from gpuledger.producers.runtime import ProducerMetrics, StateFile, poll_on_grid
from gpuledger.producers.scrape_http import ScrapeError, fetch_text

__all__ = ["DcgmScrapeProducer", "check_exposition"]

FILE = "dcgm.jsonl"


def check_exposition(text: str) -> str | None:
    """Why a scrape body is not a dcgm-exporter exposition, or None when it is one."""
    try:
        parsed = parse_exposition(text)
    except ValueError as exc:
        return f"not Prometheus text exposition: {exc}"
    other = "not an attribution field: "  # the skip reason of a series by its name
    dcgm_series = parsed.series_parsed + sum(n for reason, n in parsed.skipped.items()
                                             if not reason.startswith(other) or reason[len(other):].startswith("DCGM_"))
    if dcgm_series == 0:
        return "no DCGM_FI_* series in it"
    return None


class DcgmScrapeProducer:
    """One node's dcgm-exporter, scraped at every grid tick into ``dcgm.jsonl``."""

    source = "dcgm"

    def __init__(self, url: str, node: str, interval_s: float, metrics: ProducerMetrics,
                 timeout_s: float = 5.0, state: StateFile | None = None) -> None:
        if not node:
            raise ValueError("node is empty: name the node this dcgm-exporter runs on")
        self.url, self.node, self.interval_s, self.timeout_s = url, node, interval_s, timeout_s
        self.metrics = metrics
        self._last_problem: str | None = None

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Scrape at each grid tick until ``stop`` is set. Never raises for a failed scrape."""
        poll_on_grid(lambda tick_ms: self.scrape(sink, tick_ms, now_ms), self.interval_s, now_ms, stop)

    def scrape(self, sink: LineSink, tick_ms: int, now_ms: Callable[[], int]) -> bool:
        """One scrape stamped ``tick_ms``: put and flush its line. Returns whether it was published."""
        try:
            text = fetch_text(self.url, self.timeout_s, "dcgm-exporter's /metrics")
            problem = check_exposition(text)
            if problem is not None:
                raise ScrapeError("unparseable", f"{self.url} answered a body that is not a dcgm-exporter scrape "
                                                 f"({problem}); not published: check that the URL is "
                                                 "dcgm-exporter's /metrics")
        except ScrapeError as exc:
            self._problem(exc.reason, str(exc))
            return False
        try:
            sink.put(FILE, {"observed_at": format_rfc3339(tick_ms), "node": self.node, "exposition": text})
            sink.flush()
        except Exception as exc:  # the sink (the broker) failed: this tick is lost, the next one retries
            self._problem("sink", f"dcgm scrape of {self.url} at {format_rfc3339(tick_ms)} not delivered "
                                  f"({type(exc).__name__}: {exc}): check the broker")
            return False
        self.metrics.sent(FILE)
        self.metrics.observed(tick_ms, now_ms())
        if self._last_problem is not None:
            _say(f"dcgm: {self.url} scraped again")
            self._last_problem = None
        return True

    def _problem(self, reason: str, message: str) -> None:
        self.metrics.error(reason)
        if message != self._last_problem:  # said once per distinct problem, not at every tick
            _say(f"dcgm: {message}")
            self._last_problem = message


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
