"""Generated GPU demand with a known weekly pattern and trend (the forecast tests' truth)."""

from __future__ import annotations

import math
import random


def demand_gpus(hour: int, rng: random.Random) -> float:
    """GPU-equivalents held in hour ``hour`` since a Monday 00:00 UTC: 40 + 0.5/day trend,
    weekdays 15 above weekends, a working-day swell peaking at 14:00, and noise of up to ±2."""
    day, hod = divmod(hour, 24)
    weekday = day % 7 < 5
    swell = max(0.0, math.sin(math.pi * (hod - 8) / 12)) * (12 if weekday else 3)
    return 40 + 0.5 * day + (15 if weekday else 0) + swell + rng.uniform(-2, 2)


def generated(weeks: int, seed: int = 17) -> list[float]:
    rng = random.Random(seed)
    return [demand_gpus(h, rng) for h in range(weeks * 7 * 24)]
