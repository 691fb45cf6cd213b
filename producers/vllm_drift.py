"""Do the request events add up to what vLLM itself counted?

``VllmDriftMonitor`` scrapes a vLLM ``/metrics`` on the grid (``parse_vllm_metrics``) and,
per model, compares what vLLM counted since its first scrape with the request events the
request producers handed over in the same time (a ``RequestTally``, fed by wrapping their
sink in a ``TallySink``). It exports

    gpuledger_requests_drift_ratio{source, model, measure} = events / vLLM - 1

for ``measure`` in ``prompt_tokens`` (vs ``vllm:prompt_tokens_total``), ``completion_tokens``
(vs ``vllm:generation_tokens_total``) and ``requests`` (vs ``vllm:request_success_total``),
and says on stderr when ``|drift|`` passes the threshold and when it is back within. 0 means
the events account for exactly what the server did; -0.1 means a tenth of the server's work
has no event (lost log lines, a gateway that does not log); +inf means events for a model the
server did no work for.

What is compared, and why: tokens are summed over every event (a failed request carries the
tokens the gateway reported, usually 0). vLLM's ``request_success_total``, as
``parse_vllm_metrics`` sums it, counts every request the engine finished, whatever its
``finished_reason`` (stop, length, repetition, and also abort and error), so the ``requests``
measure counts the events that reached the engine and finished there: outcome ``success``
(stop, length, repetition) and ``cancelled`` (abort); ``error`` events are left out, since
most gateway errors (validation, rate limits, timeouts upstream) never reach the engine.
Counter resets (a vLLM restart) are handled as Prometheus' ``increase`` does. Only models the
server reports are compared; ``endpoint_id`` narrows the events to one endpoint when several
serve a model of the same name. The monitor emits no capture lines.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge

from gpuledger.domain.vllm import parse_vllm_metrics
from gpuledger.producers.lines import LineSink
from gpuledger.producers.runtime import ProducerMetrics, StateFile, poll_on_grid
from gpuledger.producers.scrape_http import ScrapeError, fetch_text

__all__ = ["MEASURES", "RequestTally", "TallySink", "VllmDriftMonitor", "accumulate_increase", "drift_ratios"]

MEASURES = ("prompt_tokens", "completion_tokens", "requests")
VLLM_TOTAL = {"prompt_tokens": "prompt_tokens", "completion_tokens": "generation_tokens",
              "requests": "successful_requests"}  # measure -> parse_vllm_metrics' key
_REACHED_ENGINE = ("success", "cancelled")

Totals = dict[str, dict[str, float]]  # model -> measure -> value


class RequestTally:
    """Running totals of the request events seen, per (endpoint_id, model); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str], dict[str, float]] = {}

    def add(self, line: dict) -> None:
        """Count one ``requests.jsonl`` line (one that cannot be counted is ignored: the
        validator dead-letters it)."""
        model, endpoint = line.get("model"), line.get("endpoint_id")
        prompt, completion = line.get("prompt_tokens"), line.get("completion_tokens")
        if not isinstance(model, str) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 for v in (prompt, completion)):
            return
        with self._lock:
            totals = self._totals.setdefault((str(endpoint or ""), model), dict.fromkeys(MEASURES, 0.0))
            totals["prompt_tokens"] += prompt
            totals["completion_tokens"] += completion
            totals["requests"] += line.get("outcome") in _REACHED_ENGINE

    def per_model(self, endpoint_id: str | None = None) -> Totals:
        """Totals per model (of one endpoint, or all)."""
        out: Totals = {}
        with self._lock:
            for (endpoint, model), totals in self._totals.items():
                if endpoint_id is None or endpoint == endpoint_id:
                    into = out.setdefault(model, dict.fromkeys(MEASURES, 0.0))
                    for m in MEASURES:
                        into[m] += totals[m]
        return out


class TallySink:
    """A LineSink that counts the ``requests.jsonl`` lines going through into a tally."""

    def __init__(self, sink: LineSink, tally: RequestTally) -> None:
        self.sink, self.tally = sink, tally

    def put(self, file: str, line: dict) -> str | None:
        reason = self.sink.put(file, line)
        if reason is None and file == "requests.jsonl":
            self.tally.add(line)
        return reason

    def reject(self, file: str, line: dict, reason: str) -> None:
        self.sink.reject(file, line, reason)

    def flush(self) -> None:
        self.sink.flush()


def accumulate_increase(previous: Totals, current: Totals, increase: Totals) -> Totals:
    """``increase`` plus what each counter rose from ``previous`` to ``current``; a counter
    that went down was reset, and rose by its whole current value (Prometheus ``increase``)."""
    out = {model: dict(values) for model, values in increase.items()}
    for model, values in current.items():
        into = out.setdefault(model, dict.fromkeys(values, 0.0))
        before = previous.get(model, {})
        for key, value in values.items():
            prior = before.get(key, 0.0)
            into[key] = into.get(key, 0.0) + (value - prior if value >= prior else value)
    return out


def drift_ratios(events: Totals, vllm: Totals) -> dict[tuple[str, str], float]:
    """(model, measure) -> events / vLLM - 1, for every model vLLM reports. Both 0: 0 (they
    agree); vLLM 0 but events: +inf."""
    out = {}
    for model, counted in vllm.items():
        seen = events.get(model, {})
        for measure in MEASURES:
            theirs, ours = counted.get(VLLM_TOTAL[measure], 0.0), seen.get(measure, 0.0)
            out[(model, measure)] = (ours / theirs - 1.0 if theirs > 0 else 0.0 if ours == 0 else math.inf)
    return out


_GAUGES: dict[int, tuple[CollectorRegistry, Gauge]] = {}
_GAUGES_LOCK = threading.Lock()


def _drift_gauge(registry: CollectorRegistry) -> Gauge:
    with _GAUGES_LOCK:
        found = _GAUGES.get(id(registry))
        if found is None or found[0] is not registry:
            gauge = Gauge("gpuledger_requests_drift_ratio",
                          "Request events over what vLLM counted since the monitor started, minus 1.",
                          ["source", "model", "measure"], registry=registry)
            found = _GAUGES[id(registry)] = (registry, gauge)
        return found[1]


class VllmDriftMonitor:
    """Scrapes one vLLM ``/metrics`` on the grid and exports the drift of the request events."""

    source = "vllm"

    def __init__(self, url: str, interval_s: float, metrics: ProducerMetrics, tally: RequestTally | None = None,
                 threshold: float = 0.05, endpoint_id: str | None = None, timeout_s: float = 5.0,
                 state: StateFile | None = None) -> None:
        self.url, self.interval_s, self.metrics, self.threshold = url, interval_s, metrics, threshold
        self.tally = tally if tally is not None else RequestTally()
        self.endpoint_id, self.timeout_s = endpoint_id, timeout_s
        self.gauge = _drift_gauge(metrics.registry)
        self._previous: Totals | None = None  # vLLM's totals at the last scrape
        self._increase: Totals = {}
        self._events_at_start: Totals = {}
        self._outside: set[tuple[str, str]] = set()
        self._last_problem: str | None = None
        self.drift: dict[tuple[str, str], float] = {}

    def watching(self, sink: LineSink) -> TallySink:
        """``sink``, counting the request lines put through it into this monitor's tally."""
        return TallySink(sink, self.tally)

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Check at each grid tick until ``stop`` is set (``sink`` is not used: nothing is emitted)."""
        poll_on_grid(lambda tick_ms: self.check(tick_ms, now_ms), self.interval_s, now_ms, stop)

    def check(self, tick_ms: int, now_ms: Callable[[], int]) -> bool:
        """One scrape: update the increases and the drift. Returns whether vLLM answered."""
        try:
            text = fetch_text(self.url, self.timeout_s, "vLLM's /metrics")
            try:
                totals = parse_vllm_metrics(text).per_model
            except ValueError as exc:
                raise ScrapeError("unparseable", f"{self.url} answered a body that is not Prometheus text "
                                                 f"({exc}): check that the URL is vLLM's /metrics") from exc
            if not totals:
                raise ScrapeError("unparseable", f"{self.url} has no vllm:*_total series with a model_name: "
                                                 "check that the URL is vLLM's /metrics")
        except ScrapeError as exc:
            self.metrics.error(exc.reason)
            if str(exc) != self._last_problem:
                _say(f"vllm drift: {exc}")
                self._last_problem = str(exc)
            return False
        if self._last_problem is not None:
            _say(f"vllm drift: {self.url} scraped again")
            self._last_problem = None
        events_now = self.tally.per_model(self.endpoint_id)
        if self._previous is None:  # the baseline: both sides are counted from here
            self._events_at_start = events_now
            self._increase = {model: dict.fromkeys(values, 0.0) for model, values in totals.items()}
        else:
            self._increase = accumulate_increase(self._previous, totals, self._increase)
        self._previous = totals
        events = _minus(events_now, self._events_at_start)
        self.drift = drift_ratios(events, self._increase)
        for (model, measure), ratio in self.drift.items():
            self.gauge.labels(self.metrics.source, model, measure).set(ratio)
            self._report(model, measure, ratio, events)
        self.metrics.observed(tick_ms, now_ms())
        return True

    def _report(self, model: str, measure: str, ratio: float, events: Totals) -> None:
        key = (model, measure)
        ours = events.get(model, {}).get(measure, 0.0)
        theirs = self._increase.get(model, {}).get(VLLM_TOTAL[measure], 0.0)
        if abs(ratio) > self.threshold and key not in self._outside:
            self._outside.add(key)
            _say(f"vllm drift: {model} {measure}: the request events count {ours:g}, {self.url} counted "
                 f"{theirs:g} since the monitor started (drift {ratio:+.3f}, threshold {self.threshold:g}): "
                 "check that every gateway of this model writes its access log or posts its events")
        elif abs(ratio) <= self.threshold and key in self._outside:
            self._outside.discard(key)
            _say(f"vllm drift: {model} {measure} back within {self.threshold:g} ({ratio:+.3f})")


def _minus(now: Totals, before: Totals) -> Totals:
    return {model: {m: v - before.get(model, {}).get(m, 0.0) for m, v in values.items()} for model, values in now.items()}


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
