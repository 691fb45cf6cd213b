"""RFC 3339 <-> epoch milliseconds. Intervals are half-open ``[start_ms, end_ms)``."""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["MS_PER_HOUR", "format_rfc3339", "month_bounds_ms", "overlap_ms", "parse_rfc3339_ms"]

MS_PER_HOUR = 3_600_000


def parse_rfc3339_ms(text: str) -> int:
    """``2026-10-01T00:00:10Z`` (fraction and offset allowed) -> epoch ms. Raises ValueError."""
    if not isinstance(text, str) or "T" not in text:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"timestamp without a UTC offset: {text!r}")
    return int(round(value.timestamp() * 1000))


def format_rfc3339(ms: int) -> str:
    """Epoch ms -> ``YYYY-MM-DDTHH:MM:SS[.fff]Z``."""
    value = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    if ms % 1000:
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def overlap_ms(a_from: int, a_to: int, b_from: int, b_to: int) -> int:
    """Length of the intersection of two half-open intervals."""
    return max(0, min(a_to, b_to) - max(a_from, b_from))


def month_bounds_ms(ms: int) -> tuple[int, int]:
    """The calendar month (UTC) containing ``ms``: ``[first day 00:00, next month's first day)``."""
    day = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    start = datetime(day.year, day.month, 1, tzinfo=timezone.utc)
    end = datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=timezone.utc)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)
