"""The showback's daily series: days add up to the window's totals, and match a scenario
computed by hand (partial first and last days, a rate-card change at noon, a quota, hours a
policy does not bill)."""

from __future__ import annotations

from decimal import Decimal

import orjson
import pytest

from gpuledger.domain.cost import card_windows, parse_ratecards
from gpuledger.domain.daily import DAY_MS, day_spans
from gpuledger.domain.showback import build_showback
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")
CARDS = [{"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": "2026-10-02T12:00:00Z",
          "currency": "EUR", "gpu_hour": {"A100": {"guaranteed": "2.00", "borrowed": "1.00"}}},
         {"version": "v2", "valid_from": "2026-10-02T12:00:00Z", "valid_to": None,
          "currency": "EUR", "gpu_hour": {"A100": {"guaranteed": "3.00", "borrowed": "1.50"}}}]
QUOTAS = [{"tenant_id": "t1", "gpu_class": "A100", "guaranteed_gpus": 1, "valid_from": "2026-10-01T00:00:00Z"}]


def _rows(from_ms: int, to_ms: int, held: list[tuple], cards: list[dict] = CARDS, **extra) -> dict:
    """Query rows as sinks/showback_sql.py returns them, for 4 A100s and no other evidence."""
    windows = [{"version": card.version if card else None, "from_ms": a, "to_ms": b,
                "physical": [("A100", 4 * (b - a))], "buckets": []}
               for card, a, b in card_windows(parse_ratecards(cards), from_ms, to_ms)]
    capacity: dict[tuple, float] = {}
    for tenant, _, _, a, b, fraction, confidence in held:
        key = (tenant, "exclusive", confidence)
        capacity[key] = capacity.get(key, 0.0) + fraction * (min(b, to_ms) - max(a, from_ms)) / H
    return {"from_ms": from_ms, "to_ms": to_ms, "as_of_ms": to_ms, "physical": [(4 * (to_ms - from_ms) / H,)],
            "tenant_capacity": [(*k, v) for k, v in sorted(capacity.items())], "tenant_utilization": [],
            "platform_capacity": [], "unattributed_samples": [], "endpoint_capacity": [], "endpoint_usage": [],
            "productive_work": [], "ratecards": [orjson.dumps(cards).decode()],
            "quotas": [orjson.dumps(QUOTAS).decode()], "windows": windows, "held": held, **extra}


def _scenario() -> dict:
    """Oct 1 12:00 .. Oct 3 12:00. t1 (quota 1 A100) holds GPU 1 all the time and GPU 2 from
    18:00 to Oct 2 06:00; t2 holds a time-sliced (modeled: not billed) GPU Oct 2 16:00 .. Oct 3
    04:00. Card v1 (2.00 / 1.00) until Oct 2 12:00, then v2 (3.00 / 1.50)."""
    held = [("t1", "A100", "A100", T0 + 12 * H, T0 + 60 * H, 1.0, "high"),
            ("t1", "A100", "A100", T0 + 18 * H, T0 + 30 * H, 1.0, "high"),
            ("t2", "A100", "A100", T0 + 40 * H, T0 + 52 * H, 1.0, "modeled")]
    return _rows(T0 + 12 * H, T0 + 60 * H, held,
                 tenant_utilization=[("t1", 60.0, 41.0), ("t2", 12.0, 12.0)],
                 tenant_daily_utilization=[("t1", T0, 18.0, 9.0), ("t1", T0 + DAY_MS, 30.0, 20.0),
                                           ("t1", T0 + 2 * DAY_MS, 12.0, 12.0), ("t2", T0 + DAY_MS, 8.0, 8.0),
                                           ("t2", T0 + 2 * DAY_MS, 4.0, 4.0)])


def _tenants(doc: dict) -> dict[str, dict]:
    return {t["tenant_id"]: t for t in doc["tenants"]}


def test_day_spans_cut_at_utc_midnight():
    assert day_spans(T0 + 12 * H, T0 + 60 * H) == [(T0 + 12 * H, T0 + 24 * H), (T0 + 24 * H, T0 + 48 * H),
                                                   (T0 + 48 * H, T0 + 60 * H)]
    assert day_spans(T0, T0 + DAY_MS) == [(T0, T0 + DAY_MS)]
    assert day_spans(T0, T0) == []


def test_days_match_the_hand_computed_scenario():
    """t1: Oct 1 (12 h) 12 guaranteed + 6 borrowed at v1 = 30.00; Oct 2 24 + 6, v1 until noon
    (12 x 2.00 + 6 x 1.00) and v2 after (12 x 3.00) = 66.00; Oct 3 (12 h) 12 + 0 at v2 = 36.00.
    t2 has no quota: all borrowed, 8 h and 4 h, charged nothing (under review)."""
    t = _tenants(build_showback(_scenario()))
    assert t["t1"]["daily"] == [
        {"day": "2026-10-01", "guaranteed_gpu_hours": 12.0, "borrowed_gpu_hours": 6.0, "idle_gpu_hours": 9.0,
         "gpu_hour_cost": 30.0},
        {"day": "2026-10-02", "guaranteed_gpu_hours": 24.0, "borrowed_gpu_hours": 6.0, "idle_gpu_hours": 10.0,
         "gpu_hour_cost": 66.0},
        {"day": "2026-10-03", "guaranteed_gpu_hours": 12.0, "borrowed_gpu_hours": 0.0, "idle_gpu_hours": 0.0,
         "gpu_hour_cost": 36.0}]
    assert [(d["borrowed_gpu_hours"], d["gpu_hour_cost"]) for d in t["t2"]["daily"]] == [
        (0.0, 0.0), (8.0, 0.0), (4.0, 0.0)]


def test_days_add_up_to_the_window_totals():
    for e in build_showback(_scenario())["tenants"]:
        days = e["daily"]
        assert sum(d["guaranteed_gpu_hours"] for d in days) == pytest.approx(e["guaranteed_gpu_hours"], abs=1e-9)
        assert sum(d["borrowed_gpu_hours"] for d in days) == pytest.approx(e["borrowed_gpu_hours"], abs=1e-9)
        assert sum(d["idle_gpu_hours"] for d in days) == pytest.approx(e["idle_allocated_gpu_hours"], abs=1e-9)
        cost = sum(Decimal(str(d["gpu_hour_cost"])) for d in days)
        assert cost == Decimal(str(e["cost"]["guaranteed"])) + Decimal(str(e["cost"]["borrowed"]))
    assert _tenants(build_showback(_scenario()))["t1"]["cost"]["guaranteed"] == 120.0  # 24 x 2.00 + 24 x 3.00


def test_cents_that_fall_between_days_still_add_up():
    """One A100 for an hour across midnight at 0.01 an hour: the line is one cent; 20 minutes
    before midnight and 40 after, the cent goes to the second day."""
    cards = [{"version": "c", "valid_from": "2026-10-01T00:00:00Z", "currency": "EUR",
              "gpu_hour": {"A100": {"guaranteed": "0.01", "borrowed": "0.01"}}}]
    start = T0 + DAY_MS - 20 * 60_000
    rows = _rows(T0, T0 + 2 * DAY_MS, [("t1", "A100", "A100", start, start + H, 1.0, "high")], cards)
    (e,) = build_showback(rows)["tenants"]
    assert e["cost"]["guaranteed"] == 0.01
    assert [d["gpu_hour_cost"] for d in e["daily"]] == [0.0, 0.01]
    assert [d["guaranteed_gpu_hours"] for d in e["daily"]] == pytest.approx([1 / 3, 2 / 3], abs=1e-12)


def test_without_a_rate_card_the_days_have_hours_and_no_cost():
    rows = _scenario()
    rows["ratecards"] = []
    rows["windows"] = [{**w, "version": None} for w in rows["windows"]]
    days = _tenants(build_showback(rows))["t1"]["daily"]
    assert [d["gpu_hour_cost"] for d in days] == [None, None, None]
    assert [d["guaranteed_gpu_hours"] for d in days] == [12.0, 24.0, 12.0]


def test_a_tenant_filter_keeps_only_its_days():
    doc = build_showback(_scenario(), tenant="t2")
    assert [t["tenant_id"] for t in doc["tenants"]] == ["t2"] and len(doc["tenants"][0]["daily"]) == 3
