"""The observed cadence of one source (a node's DCGM scrapes, its PodResources snapshots, a
host's vGPU snapshots), and how long a sample of it stands for.

No cadence is assumed. A sample at ``t`` stands for ``[t, t_next)``, the time until the next
sample from the same source, when that interval is within the source's staleness limit:
``STALE_CADENCES`` times the median of its recent intervals, never more than the configured
ceiling (the ceiling alone while no interval is known yet). An interval beyond the limit
means the source stopped for a while: its last sample stands for one cadence, and the rest
is a gap (neither idle nor active, nobody's allocation). So a 30-s or 60-s scrape, jitter,
and a missed scrape or two are all covered, while an outage is not.

Intervals beyond the limit are not learnt, so an outage never stretches the cadence. All
times are epoch ms.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field

__all__ = ["MAX_STALE_CEILING_MS", "STALE_CADENCES", "Cadence", "sample_end_ms"]

STALE_CADENCES = 4  # missed samples (and ±20 % jitter on them) stay well inside the limit
WINDOW = 9  # recent intervals kept: the median ignores one-off outliers
# The largest ceiling a deployment may set: a sample part over a capacity fact keeps the
# sample's time, so it is observed at most this long before the part; readers bound the
# samples of a set of facts by it (sinks/coverage_sql.py).
MAX_STALE_CEILING_MS = 7_200_000


@dataclass
class Cadence:
    """The recent intervals of one source, oldest first. They change through ``step`` only:
    the median is asked for every scrape and snapshot, so the intervals are sorted once (when
    first asked) and the sorted copy then follows each step (the interval learnt put in its
    place, the one dropped taken out), with no sort again."""

    intervals_ms: list[int] = field(default_factory=list)
    _sorted: list[int] | None = field(default=None, init=False, repr=False, compare=False)  # None: not asked yet

    def median_ms(self) -> int | None:
        ordered = self._sorted
        if ordered is None:
            ordered = self._sorted = sorted(self.intervals_ms)
        return ordered[len(ordered) // 2] if ordered else None

    def stale_after_ms(self, ceiling_ms: int) -> int:
        """The longest interval a sample can stand for."""
        median = self.median_ms()
        return ceiling_ms if median is None else min(ceiling_ms, STALE_CADENCES * median)

    def step(self, last_ms: int, next_ms: int, ceiling_ms: int) -> int:
        """Where the sample at ``last_ms`` stops standing, given the next one at ``next_ms``;
        learns the interval when it is within the limit."""
        end = sample_end_ms(self, last_ms, next_ms, ceiling_ms)
        if end == next_ms:
            learnt, intervals = next_ms - last_ms, self.intervals_ms
            intervals.append(learnt)
            ordered = self._sorted
            if ordered is not None:  # the sorted copy follows
                insort(ordered, learnt)
                while len(intervals) > WINDOW:
                    del ordered[bisect_left(ordered, intervals.pop(0))]
            else:
                del intervals[:-WINDOW]
        return end


def sample_end_ms(cadence: Cadence, t_ms: int, next_ms: int | None, ceiling_ms: int) -> int:
    """The end of what the sample at ``t_ms`` stands for: the next sample when it came in time;
    else (late, or the source stopped: ``next_ms`` None) one cadence, or nothing while no
    cadence is known."""
    if next_ms is not None and next_ms - t_ms <= cadence.stale_after_ms(ceiling_ms):
        return next_ms
    median = cadence.median_ms()
    return t_ms + (median if median is not None else 0)
