"""Scrapes a model server's ``/metrics`` (vLLM, Triton, NIM) on the grid and emits
``model-metrics.jsonl`` lines: ``{"observed_at": <the grid tick>, "endpoint_id", "runtime",
"pod", "revision", "exposition": <body, verbatim>}``.

The producer runs next to one model server (a sidecar, or a DaemonSet per node scraping its
pods) and names the endpoint it serves; the pod and the revision are optional (a revision
may also come from the series' labels: domain/model_metrics.py). A body is checked with the
parser the engine uses before it is published: one that is not Prometheus text, or that has
no series of a model (an HTML error page, an empty answer), is counted as ``unparseable`` and
not published, since it carries no evidence and its gap is what a failed scrape leaves.
Failures are counted, said once per distinct problem on stderr with the URL, and retried on
the next tick; the loop never stops on them.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from gpuledger.domain.model_metrics import parse_model_metrics
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.lines import LineSink
from gpuledger.producers.runtime import ProducerMetrics, poll_on_grid
from gpuledger.producers.scrape_http import ScrapeError, fetch_text

__all__ = ["ModelScrapeProducer", "check_model_exposition"]

FILE = "model-metrics.jsonl"
RUNTIMES = ("", "vllm", "triton", "nim")


def check_model_exposition(text: str, runtime: str = "") -> str | None:
    """Why a body is not a model server's scrape, or None when it is one."""
    try:
        readings, _ = parse_model_metrics(text, runtime=runtime)
    except ValueError as exc:
        return f"not Prometheus text exposition: {exc}"
    if not readings:
        return "no model efficiency series of any model in it"
    return None


class ModelScrapeProducer:
    """One model server's ``/metrics``, scraped at every grid tick into ``model-metrics.jsonl``."""

    source = "model-metrics"

    def __init__(self, url: str, endpoint_id: str, interval_s: float, metrics: ProducerMetrics, runtime: str = "",
                 pod: str = "", revision: str = "", timeout_s: float = 5.0) -> None:
        if not endpoint_id:
            raise ValueError("endpoint_id is empty: name the endpoint this model server serves")
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be vllm, triton or nim (or empty), got {runtime!r}")
        self.url, self.endpoint_id, self.interval_s, self.timeout_s = url, endpoint_id, interval_s, timeout_s
        self.runtime, self.pod, self.revision, self.metrics = runtime, pod, revision, metrics
        self._last_problem: str | None = None

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        poll_on_grid(lambda tick_ms: self.scrape(sink, tick_ms, now_ms), self.interval_s, now_ms, stop)

    def scrape(self, sink: LineSink, tick_ms: int, now_ms: Callable[[], int]) -> bool:
        """One scrape stamped ``tick_ms``: put and flush its line. Returns whether it was published."""
        try:
            text = fetch_text(self.url, self.timeout_s, "the model server's /metrics")
            problem = check_model_exposition(text, self.runtime)
            if problem is not None:
                raise ScrapeError("unparseable", f"{self.url} answered a body that is not a model server scrape "
                                                 f"({problem}); not published: check that the URL is the model "
                                                 "server's /metrics")
        except ScrapeError as exc:
            self._problem(exc.reason, str(exc))
            return False
        line = {"observed_at": format_rfc3339(tick_ms), "endpoint_id": self.endpoint_id, "runtime": self.runtime,
                "pod": self.pod, "revision": self.revision, "exposition": text}
        try:
            sink.put(FILE, line)
            sink.flush()
        except Exception as exc:  # the sink (the broker) failed: this tick is lost, the next one retries
            self._problem("sink", f"model scrape of {self.url} at {format_rfc3339(tick_ms)} not delivered "
                                  f"({type(exc).__name__}: {exc}): check the broker")
            return False
        self.metrics.sent(FILE)
        self.metrics.observed(tick_ms, now_ms())
        if self._last_problem is not None:
            print(f"model-metrics: {self.url} scraped again", file=sys.stderr, flush=True)
            self._last_problem = None
        return True

    def _problem(self, reason: str, message: str) -> None:
        self.metrics.error(reason)
        if message != self._last_problem:
            print(f"model-metrics: {message}", file=sys.stderr, flush=True)
            self._last_problem = message
