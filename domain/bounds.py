"""Plausibility bounds on what a source says: a value outside them is not evidence.

Each check returns ``None`` when the value is plausible, else the reason, naming the bound it
broke, for the dead letter. Pure: the clock the event time is judged against is an argument
(``now_ms``, the publisher's clock, corrected to the broker's where a live producer measures it).
"""

from __future__ import annotations

import math

from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["EARLIEST_EVENT_MS", "MAX_TOKEN_COUNT", "check_event_time_ms", "check_latency_s", "check_rate",
           "check_token_count"]

EARLIEST_EVENT_MS = 946_684_800_000  # 2000-01-01T00:00:00Z: nothing gpuledger attributes is older
# Tokens of one request: no context window or generation comes near 2^31; with this bound an
# Int64 sum needs 2^32 requests of it to wrap, and no sum of a period's requests can.
MAX_TOKEN_COUNT = 2**31 - 1


def _iso(ms: int) -> str:
    try:
        return format_rfc3339(ms)
    except (ValueError, OverflowError, OSError):  # beyond the years datetime holds
        return f"{ms} ms since 1970"


def check_event_time_ms(t_ms: int, now_ms: int, max_future_ms: int) -> str | None:
    """An event time must be on or after 2000-01-01 and at most ``max_future_ms`` ahead of ``now_ms``."""
    if t_ms < EARLIEST_EVENT_MS:
        return f"event time {_iso(t_ms)} is before {_iso(EARLIEST_EVENT_MS)}, the earliest plausible time"
    if t_ms > now_ms + max_future_ms:
        return (f"event time {_iso(t_ms)} is more than {max_future_ms / 1000:g} s (max_future_skew_s) ahead of "
                f"the publisher's clock {_iso(now_ms)}")
    return None


def check_token_count(n: int, name: str = "tokens") -> str | None:
    """A token count of one request must be an integer with 0 <= n <= 2^31 - 1."""
    if isinstance(n, bool) or not isinstance(n, int):
        return f"{name} must be an integer, got {n!r}"
    if n < 0:
        return f"{name} {n} is negative: a token count is 0 or more"
    if n > MAX_TOKEN_COUNT:
        return f"{name} {n} is above {MAX_TOKEN_COUNT} (2^31 - 1), the largest plausible token count of one request"
    return None


def check_latency_s(value: float | None, name: str = "latency_s") -> str | None:
    """A latency in seconds is unknown (None) or finite and 0 or more."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{name} must be a finite number of seconds or null, got {value!r}"
    if value < 0:
        return f"{name} {value} is negative: a latency is 0 s or more"
    return None


def check_rate(value: object, name: str = "rate") -> str | None:
    """A price (per hour, per million tokens) or an amount must be a finite number, 0 or more."""
    if isinstance(value, bool):
        return f"{name} must be a number, got {value!r}"
    try:
        x = float(str(value))
    except (TypeError, ValueError):
        return f"{name} must be a number, got {value!r}"
    if not math.isfinite(x):
        return f"{name} {value!r} is not finite: a rate is a finite number, 0 or more"
    if x < 0:
        return f"{name} {value!r} is negative: a rate is 0 or more"
    return None
