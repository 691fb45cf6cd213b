"""Peak-demand forecasts: hourly demand of a capacity class -> daily peaks -> a Holt-Winters
forecast of the daily peaks with a weekly season, its backtest, and its peaks by week and month.

The model is statsmodels' ``ExponentialSmoothing`` (additive trend, additive season of 7
days), fitted on the daily peaks: the peak is what capacity must cover, and a daily series
makes the weekly pattern a 7-step season. It needs two whole seasons (14 days); with less
history no forecast is made and the reason says so. The backtest holds out the last days of
the history (the horizon's length, leaving at least two seasons to fit), fits on the rest and
compares: the mean absolute percentage error of the daily peaks and the error of the
held-out span's peak.

Times are UTC milliseconds; days, weeks (starting Monday) and months are half-open
``[start, end)``. An hour with no demand is demand 0, not missing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from gpuledger.domain.timeutil import month_bounds_ms

__all__ = ["MS_PER_DAY", "MS_PER_HOUR", "SEASON_DAYS", "Backtest", "PeakForecast", "backtest", "bucket_start_ms",
           "daily_peaks", "forecast_peaks", "hourly_curve", "peaks_by_bucket"]

MS_PER_HOUR = 3_600_000
MS_PER_DAY = 24 * MS_PER_HOUR
SEASON_DAYS = 7
MIN_DAYS = 2 * SEASON_DAYS
MODEL = "statsmodels ExponentialSmoothing (additive trend, additive 7-day season) on daily peaks"


@dataclass(frozen=True)
class Backtest:
    holdout_days: int
    mape_daily_peak: float | None  # mean |forecast - actual| / actual over the held-out days with demand
    peak_error_ratio: float | None  # (forecast peak - actual peak) / actual peak of the held-out span
    actual_peak: float
    forecast_peak: float


@dataclass(frozen=True)
class PeakForecast:
    model: str  # MODEL, "constant" (a flat history) or "none"
    reason: str  # why there is no forecast ("" when there is one)
    daily_peaks: list[float]  # forecast daily peaks, from the first day after the history
    backtest: Backtest | None


def hourly_curve(points: Iterable[tuple[int, float]], from_ms: int, to_ms: int) -> list[float]:
    """Dense hourly values over ``[from_ms, to_ms)`` (hour-aligned) from (hour_ms, value)
    points; hours without a point are 0; points outside are ignored."""
    hours = (to_ms - from_ms) // MS_PER_HOUR
    out = [0.0] * hours
    for hour_ms, value in points:
        i = (hour_ms - from_ms) // MS_PER_HOUR
        if 0 <= i < hours:
            out[i] += float(value)
    return out


def daily_peaks(hourly: list[float]) -> list[float]:
    """The highest hour of each 24 hours, counted back from the end of the history (a
    partial first day: of the hours it has)."""
    first = len(hourly) % 24
    return ([max(hourly[:first])] if first else []) + [max(hourly[i:i + 24]) for i in range(first, len(hourly), 24)]


def _fit(history: list[float], horizon_days: int) -> tuple[str, list[float]]:
    if max(history) - min(history) <= 1e-12 * max(1.0, abs(max(history))):
        return "constant", [history[-1]] * horizon_days
    import numpy as np
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    with warnings.catch_warnings():  # convergence chatter: the backtest is the judge of the fit
        warnings.simplefilter("ignore")
        fitted = ExponentialSmoothing(np.asarray(history, dtype=float), trend="add", seasonal="add",
                                      seasonal_periods=SEASON_DAYS, initialization_method="estimated").fit()
        values = fitted.forecast(horizon_days)
    return MODEL, [max(0.0, float(v)) if math.isfinite(v) else 0.0 for v in values]


def backtest(history: list[float], holdout_days: int) -> Backtest | None:
    """Fit on all but the last ``holdout_days`` and compare with them; None when what is left
    to fit is under two seasons."""
    if holdout_days < 1 or len(history) - holdout_days < MIN_DAYS:
        return None
    train, actual = history[:-holdout_days], history[-holdout_days:]
    _, predicted = _fit(train, holdout_days)
    errors = [abs(p - a) / a for p, a in zip(predicted, actual) if a > 0]
    actual_peak, forecast_peak = max(actual), max(predicted)
    return Backtest(holdout_days, sum(errors) / len(errors) if errors else None,
                    (forecast_peak - actual_peak) / actual_peak if actual_peak > 0 else None, actual_peak, forecast_peak)


def forecast_peaks(history: list[float], horizon_days: int) -> PeakForecast:
    """Forecast the next ``horizon_days`` daily peaks of a daily-peak history; backtested on
    the last ``horizon_days`` of the history where at least two seasons remain before them
    (else on as many days as leave two seasons)."""
    if horizon_days < 1:
        raise ValueError("the horizon must be at least one day")
    if len(history) < MIN_DAYS:
        return PeakForecast("none", f"{len(history)} days of history: a weekly season needs at least {MIN_DAYS}",
                            [], None)
    model, values = _fit(history, horizon_days)
    return PeakForecast(model, "", values, backtest(history, min(horizon_days, len(history) - MIN_DAYS)))


def bucket_start_ms(t_ms: int, bucket: str) -> int:
    """The start of the UTC week (Monday) or month holding ``t_ms``."""
    day = t_ms - t_ms % MS_PER_DAY
    if bucket == "week":
        return day - ((day // MS_PER_DAY + 3) % 7) * MS_PER_DAY  # 1970-01-01 was a Thursday
    if bucket == "month":
        return month_bounds_ms(t_ms)[0]
    raise ValueError(f"unknown bucket {bucket!r}: week or month")


def peaks_by_bucket(values: list[float], from_ms: int, step_ms: int, bucket: str) -> list[tuple[int, float, float]]:
    """(bucket start, peak, mean) per week or month of a series whose value ``i`` stands for
    ``[from_ms + i * step_ms, from_ms + (i + 1) * step_ms)``; a bucket the series covers
    partly is summarized over what it covers."""
    groups: dict[int, list[float]] = {}
    for i, v in enumerate(values):
        groups.setdefault(bucket_start_ms(from_ms + i * step_ms, bucket), []).append(v)
    return [(start, max(vs), sum(vs) / len(vs)) for start, vs in sorted(groups.items())]
