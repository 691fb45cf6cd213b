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

from gpuledger.domain.dcgm import parse_exposition
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.grid_scrape import GridScrapeProducer
from gpuledger.producers.runtime import ProducerMetrics, StateFile

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


class DcgmScrapeProducer(GridScrapeProducer):
    """One node's dcgm-exporter, scraped at every grid tick into ``dcgm.jsonl``."""

    source, FILE, what, kind = "dcgm", FILE, "dcgm-exporter's /metrics", "dcgm-exporter"

    def __init__(self, url: str, node: str, interval_s: float, metrics: ProducerMetrics,
                 timeout_s: float = 5.0, state: StateFile | None = None) -> None:
        if not node:
            raise ValueError("node is empty: name the node this dcgm-exporter runs on")
        super().__init__(url, interval_s, metrics, timeout_s)
        self.node = node

    def check(self, text: str) -> str | None:
        return check_exposition(text)

    def line(self, tick_ms: int, text: str) -> dict:
        return {"observed_at": format_rfc3339(tick_ms), "node": self.node, "exposition": text}
