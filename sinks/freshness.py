"""Live freshness: how long after a scrape was observed its utilization facts were stored.

The sink adds, for every utilization fact it has stored, ``stored_wall_ms - observed_at_ms``
(the sample's own time on its node) to a histogram of 100-ms buckets up to one hour, longer
ones in one overflow bucket; memory is fixed whatever the hours processed. Percentiles are
read off the buckets (the upper edge of the bucket the rank falls in), so they are exact to
100 ms. A catch-up run measures how far behind the backlog was, not live freshness: read
the numbers of a sink that runs live.

The sink's metrics endpoint exports it as the Prometheus histogram
``gpuledger_sink_fact_freshness_seconds`` (``FreshnessCollector``: read at scrape time, no
per-fact observation).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

__all__ = ["FreshnessCollector", "FreshnessHistogram"]

BUCKET_MS = 100
BUCKETS = 36_000  # one hour of 100-ms buckets; the last one also holds everything longer
EXPORTED_LE_S = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800)


class FreshnessHistogram:
    def __init__(self) -> None:
        self.counts = np.zeros(BUCKETS, dtype=np.int64)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def add(self, stored_wall_ms: int, observed_at_ms: Iterable[int]) -> None:
        """Facts stored at ``stored_wall_ms`` whose samples were observed at ``observed_at_ms``
        (a fact stored before its observation, from a node clock ahead of the sink's, counts as 0)."""
        obs = np.fromiter(observed_at_ms, dtype=np.int64)
        if obs.size:
            lag = np.clip((stored_wall_ms - obs) // BUCKET_MS, 0, BUCKETS - 1)
            self.counts += np.bincount(lag, minlength=BUCKETS)

    def percentile_s(self, q: float) -> float | None:
        """The ``q``-th percentile (0 < q <= 100) in seconds; None with no facts."""
        total = self.total
        if not total:
            return None
        rank = max(1, int(np.ceil(q / 100 * total)))
        bucket = int(np.searchsorted(np.cumsum(self.counts), rank))
        return (bucket + 1) * BUCKET_MS / 1000

    def summary(self) -> str:
        if not self.total:
            return "sink: freshness: no utilization facts stored"
        return (f"sink: freshness of {self.total} utilization facts (observed_at -> stored): "
                f"p50 {self.percentile_s(50):.1f} s, p99 {self.percentile_s(99):.1f} s, "
                f"max {'>= 3600' if self.counts[-1] else f'{self.percentile_s(100):.1f}'} s")


class FreshnessCollector(Collector):
    """``gpuledger_sink_fact_freshness_seconds``: the histogram above at Prometheus bucket edges."""

    def __init__(self, histogram: FreshnessHistogram) -> None:
        self.histogram = histogram

    def collect(self):
        counts = self.histogram.counts.copy()
        cumulative = np.cumsum(counts)
        buckets = [(str(float(le)), float(cumulative[le * 1000 // BUCKET_MS - 1])) for le in EXPORTED_LE_S]
        mids_s = (np.arange(BUCKETS) + 0.5) * BUCKET_MS / 1000  # each bucket's facts at its middle
        family = HistogramMetricFamily(
            "gpuledger_sink_fact_freshness_seconds",
            "From a sample's observed_at to its utilization fact stored, per fact (100-ms resolution).",
            buckets=[*buckets, ("+Inf", float(cumulative[-1]))], sum_value=float(counts @ mids_s))
        yield family
