"""The energy split (domain/energy.py) and the rate card's energy rate, without services."""

from decimal import Decimal

import pytest

from gpuledger.domain.cost import RatecardError, parse_ratecards
from gpuledger.domain.energy import energy_parts

CARD = {"version": "v", "valid_from": "2026-10-01T00:00:00Z"}


def test_parts_add_up_to_the_measured_energy_and_unbilled_confidence_is_under_review():
    rows = [("H100", "", "", 3_600_000.0), ("H100", "a", "high", 1_200_000.0), ("H100", "b", "modeled", 600_000.0),
            ("A100", "", "", 360.0)]
    parts = energy_parts(rows, ("high", "medium"))
    assert parts["H100"] == {("tenant", "a"): 333_333, ("suspense", "b"): 166_667, ("central", ""): 500_000}
    assert sum(parts["H100"].values()) == 1_000_000  # 1 kWh in micro-kWh
    assert parts["A100"] == {("central", ""): 100}
    assert energy_parts(rows, None)["H100"][("tenant", "b")] == 166_667  # no policy: everything held bills


def test_over_held_capacity_shrinks_the_tenants_never_a_negative_central_part():
    parts = energy_parts([("H100", "", "", 3_600_000.0), ("H100", "a", "high", 3_600_000.0),
                          ("H100", "b", "high", 3_600_000.0)], ("high",))["H100"]
    assert parts == {("tenant", "a"): 500_000, ("tenant", "b"): 500_000, ("central", ""): 0}


def test_the_rate_card_takes_an_energy_rate_and_refuses_a_bad_one():
    assert parse_ratecards([{**CARD, "energy": {"per_kwh": "0.12"}}])[0].per_kwh == Decimal("0.12")
    assert parse_ratecards([CARD])[0].per_kwh is None
    for bad, why in (({"per_kwh": -1}, "negative"), ({"per_kwh": "x"}, "must be a number"),
                     ({"kwh": 1}, "per_kwh only"), ([0.1], "must be")):
        with pytest.raises(RatecardError, match=why):
            parse_ratecards([{**CARD, "energy": bad}])
