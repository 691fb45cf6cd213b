"""Money: Decimal throughout, cut at rate-card edges, split in whole cents that add up."""

from decimal import Decimal
from fractions import Fraction

import pytest

from gpuledger.domain.cost import (RatecardError, TenantCost, allocation_cost, card_windows, cents, overhead_share,
                                   parse_ratecards, token_cost)
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


def test_windows_cut_at_card_edges():
    windows = card_windows(CARDS, OCT - 3_600_000, NOV)
    assert [(c.version if c else None, a, b) for c, a, b in windows] == [
        (None, OCT - 3_600_000, OCT), ("v1", OCT, MID), ("v2", MID, NOV)]


def test_allocation_cost_is_exact_and_unpriced_classes_are_reported():
    costs = {}
    unpriced = allocation_cost({("a", "H100"): (1.5, 0.25), ("a", "A100"): (2.0, 0.0)}, CARDS[0], costs)
    assert (costs["a"].guaranteed, costs["a"].borrowed) == (Decimal("3.750"), Decimal("1.000"))
    assert unpriced == {"A100": 2.0}


def test_cents_add_up_exactly():
    parts = cents(Decimal("10.00"), {"x": Fraction(1), "y": Fraction(1), "z": Fraction(1)})
    assert parts == {"x": Decimal("3.34"), "y": Decimal("3.33"), "z": Decimal("3.33")}
    assert sum(parts.values()) == Decimal("10.00")


def test_overhead_pro_rata_and_proportional():
    costs = {}
    overhead_share(CARDS[0], 15 * 24 * 3_600_000, {"a": 30.0, "b": 10.0}, costs)  # half of a 30-day month
    assert (costs["a"].overhead, costs["b"].overhead) == (Decimal("112.50"), Decimal("37.50"))


def test_tokens_and_shown_totals():
    assert token_cost(100_000, 10_000, CARDS[0]) == Decimal("0.065")
    c = TenantCost(borrowed=Decimal("24"), variable=Decimal("0.065"), endpoint_recovered=Decimal("24"))
    assert c.shown()["total"] == 0.07 and c.shown()["variable"] == 0.07  # half up, at presentation only


def test_bad_card_names_the_entry():
    with pytest.raises(RatecardError, match=r"ratecards\[0\]"):
        parse_ratecards([{"valid_from": "2026-10-01T00:00:00Z"}])
