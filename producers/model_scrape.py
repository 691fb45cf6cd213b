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

from gpuledger.domain.model_metrics import parse_model_metrics
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.grid_scrape import GridScrapeProducer
from gpuledger.producers.runtime import ProducerMetrics

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


class ModelScrapeProducer(GridScrapeProducer):
    """One model server's ``/metrics``, scraped at every grid tick into ``model-metrics.jsonl``."""

    source, FILE, what, kind = "model-metrics", FILE, "the model server's /metrics", "model server"

    def __init__(self, url: str, endpoint_id: str, interval_s: float, metrics: ProducerMetrics, runtime: str = "",
                 pod: str = "", revision: str = "", timeout_s: float = 5.0) -> None:
        if not endpoint_id:
            raise ValueError("endpoint_id is empty: name the endpoint this model server serves")
        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be vllm, triton or nim (or empty), got {runtime!r}")
        super().__init__(url, interval_s, metrics, timeout_s)
        self.endpoint_id, self.runtime, self.pod, self.revision = endpoint_id, runtime, pod, revision

    def check(self, text: str) -> str | None:
        return check_model_exposition(text, self.runtime)

    def line(self, tick_ms: int, text: str) -> dict:
        return {"observed_at": format_rfc3339(tick_ms), "endpoint_id": self.endpoint_id, "runtime": self.runtime,
                "pod": self.pod, "revision": self.revision, "exposition": text}
