"""Plausibility bounds: each check passes plausible values and names the bound a value broke."""

import math

import pytest

from gpuledger.domain.bounds import (EARLIEST_EVENT_MS, MAX_TOKEN_COUNT, check_event_time_ms, check_latency_s,
                                     check_rate, check_token_count)
from gpuledger.domain.timeutil import parse_rfc3339_ms

NOW = parse_rfc3339_ms("2026-11-30T12:00:00Z")
DAY_MS = 86_400_000


def test_event_time_within_bounds_passes():
    assert check_event_time_ms(EARLIEST_EVENT_MS, NOW, DAY_MS) is None
    assert check_event_time_ms(NOW + DAY_MS, NOW, DAY_MS) is None
    assert check_event_time_ms(parse_rfc3339_ms("2026-10-01T00:00:00Z"), NOW, DAY_MS) is None


@pytest.mark.parametrize("iso", ["1999-12-31T23:59:59Z", "1969-12-31T00:00:00Z", "0001-01-01T00:00:00Z"])
def test_event_time_before_2000_names_the_earliest_bound(iso):
    reason = check_event_time_ms(parse_rfc3339_ms(iso), NOW, DAY_MS)
    assert reason is not None and "before 2000-01-01T00:00:00Z" in reason and iso[:10].lstrip("0") in reason


def test_event_time_too_far_ahead_names_the_skew_setting():
    reason = check_event_time_ms(NOW + DAY_MS + 1, NOW, DAY_MS)
    assert "max_future_skew_s" in reason and "86400 s" in reason and "2026-11-30T12:00:00Z" in reason
    assert check_event_time_ms(NOW + 61_000, NOW, 60_000) is not None
    assert "ms since 1970" in check_event_time_ms(10**17, NOW, DAY_MS)  # beyond year 9999: still a reason


def test_token_counts():
    assert check_token_count(0) is None and check_token_count(MAX_TOKEN_COUNT) is None
    assert "2^31" in check_token_count(MAX_TOKEN_COUNT + 1, "prompt_tokens")
    assert "prompt_tokens" in check_token_count(2**63, "prompt_tokens")
    assert "negative" in check_token_count(-1)
    assert "integer" in check_token_count(1.5) and "integer" in check_token_count(True)


def test_latencies():
    assert check_latency_s(None) is None and check_latency_s(0) is None and check_latency_s(1.25) is None
    assert "negative" in check_latency_s(-0.1, "ttft_s") and "ttft_s" in check_latency_s(-0.1, "ttft_s")
    assert "finite" in check_latency_s(math.inf) and "finite" in check_latency_s(math.nan)


def test_rates():
    for ok in (0, "2.40", 1.5, "0"):
        assert check_rate(ok) is None
    assert "negative" in check_rate("-1", "gpu_hour.H100.guaranteed")
    assert "gpu_hour.H100.guaranteed" in check_rate("-1", "gpu_hour.H100.guaranteed")
    for bad in ("NaN", "Infinity", "-inf", math.nan, math.inf):
        assert "not finite" in check_rate(bad)
    assert "number" in check_rate("cheap") and "number" in check_rate(None) and "number" in check_rate(True)
