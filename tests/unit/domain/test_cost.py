"""Money: Decimal throughout, cut at rate-card edges, split in whole cents that add up."""

from decimal import Decimal
from fractions import Fraction

import orjson
import pytest

from gpuledger.domain.cost import (RatecardError, card_windows, cents, overhead_pool, parse_ratecards, round_cents,
                                   signed_cents)
from gpuledger.domain.reference_history import in_force
from gpuledger.domain.timeutil import parse_rfc3339_ms

OCT = parse_rfc3339_ms("2026-10-01T00:00:00Z")
MID = parse_rfc3339_ms("2026-10-16T00:00:00Z")
NOV = parse_rfc3339_ms("2026-11-01T00:00:00Z")
CARDS = parse_ratecards([
    {"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": "2026-10-16T00:00:00Z",
     "gpu_hour": {"H100": {"guaranteed": 2.5, "borrowed": 4.0}}, "per_million_tokens": {"input": 0.5, "output": 1.5},
     "overhead": {"amount": 300, "rule": "proportional_to_allocation"}},
    {"version": "v2", "valid_from": "2026-10-16T00:00:00Z", "valid_to": None,
     "gpu_hour": {"H100": {"guaranteed": 2.0, "borrowed": 3.0}}},
])


def test_windows_cut_at_card_and_month_edges():
    windows = card_windows(CARDS, OCT - 3_600_000, NOV + 3_600_000)
    assert [(c.version if c else None, a, b) for c, a, b in windows] == [
        (None, OCT - 3_600_000, OCT), ("v1", OCT, MID), ("v2", MID, NOV), ("v2", NOV, NOV + 3_600_000)]


def test_cents_add_up_exactly():
    parts = cents(Decimal("10.00"), {"x": Fraction(1), "y": Fraction(1), "z": Fraction(1)})
    assert parts == {"x": Decimal("3.34"), "y": Decimal("3.33"), "z": Decimal("3.33")}
    assert sum(parts.values()) == Decimal("10.00")


def test_overhead_is_per_calendar_month_pro_rata():
    assert overhead_pool(CARDS[0], OCT, NOV) == Decimal("300.00")
    assert overhead_pool(CARDS[0], OCT, MID) == Decimal("145.16")  # 15 of October's 31 days


def test_signed_cents_add_up_to_the_rounded_exact_sum():
    amounts = [Decimal("1.005"), Decimal("-0.334"), Decimal("2.3333"), Decimal("-4.001"), Decimal("0.0049")]
    shown = signed_cents(amounts)
    assert sum(shown) == round_cents(sum(amounts))
    assert all(abs(s - a) < Decimal("0.01") for s, a in zip(shown, amounts))


def test_bad_card_names_the_entry():
    with pytest.raises(RatecardError, match=r"ratecards\[0\]"):
        parse_ratecards([{"valid_from": "2026-10-01T00:00:00Z"}])
    with pytest.raises(RatecardError, match="overhead rule"):
        parse_ratecards([{"version": "x", "valid_from": "2026-10-01T00:00:00Z", "overhead": {"rule": "flat"}}])


@pytest.mark.parametrize("where, card, cause", [
    ("gpu_hour.H100.guaranteed", {"gpu_hour": {"H100": {"guaranteed": "NaN", "borrowed": 1}}}, "not finite"),
    ("gpu_hour.H100.borrowed", {"gpu_hour": {"H100": {"guaranteed": 1, "borrowed": "Infinity"}}}, "not finite"),
    ("gpu_hour.H100.borrowed", {"gpu_hour": {"H100": {"guaranteed": 1, "borrowed": -0.5}}}, "negative"),
    ("per_million_tokens.output", {"per_million_tokens": {"input": 1, "output": -1}}, "negative"),
    ("overhead.amount", {"overhead": {"amount": "-inf"}}, "not finite"),
    ("endpoint_share_weights.input_tokens", {"endpoint_share_weights": {"input_tokens": -2}}, "negative"),
    ("gpu_hour", {"gpu_hour": {"H100": 2.5}}, "must be objects"),
])
def test_rates_must_be_finite_and_not_negative(where, card, cause):
    with pytest.raises(RatecardError, match=r"ratecards\[0\]") as err:
        parse_ratecards([{"version": "v", "valid_from": "2026-10-01T00:00:00Z", **card}])
    assert where in str(err.value) and cause in str(err.value)


def test_a_card_that_is_not_an_object_is_named():
    with pytest.raises(RatecardError, match=r"ratecards\[1\] must be an object"):
        parse_ratecards([{"version": "v", "valid_from": "2026-10-01T00:00:00Z"}, "x"])
def test_stored_documents_that_do_not_parse_are_skipped(caplog):
    good = [{"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "gpu_hour": {"H100": {"guaranteed": 2.5}}}]
    bad = [{**good[0], "version": "v2", "gpu_hour": {"H100": {"guaranteed": "NaN"}}}]
    newest_first = [orjson.dumps(bad).decode(), "{garbage", orjson.dumps(good).decode()]
    (card,) = in_force("ratecards", newest_first).parsed
    assert card.version == "v1"
    assert sum("skipping stored rate cards document" in r.getMessage() for r in caplog.records) == 2
    assert in_force("ratecards", ["{garbage"]).parsed == []
