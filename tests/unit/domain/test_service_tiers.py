"""Service tiers: an endpoint declared in a tier the rate card prices has its tokens charged at
that tier's rates, as its own SKU; other endpoints' tokens (and requests without an endpoint)
at the card's default rates; the money still reconciles exactly."""

from decimal import Decimal

import orjson
import pytest

from gpuledger.domain.cost import RatecardError, parse_ratecards
from gpuledger.domain.endpoints import EndpointsError, parse_endpoints
from gpuledger.domain.rows import money_reconciliation, price_rows
from gpuledger.domain.timeutil import parse_rfc3339_ms

OCT = parse_rfc3339_ms("2026-10-01T00:00:00Z")
NOV = parse_rfc3339_ms("2026-11-01T00:00:00Z")
H = 3_600_000
CARD = {"version": "tiers-v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
        "per_million_tokens": {"input": "0.30", "output": "0.90"},
        "service_tiers": {"batch": {"input": "0.10", "output": "0.40"}, "premium": {"input": "1.00", "output": "3.00"}}}
ENDPOINTS = [
    {"endpoint_id": "chat", "owner_tenant_id": "a", "namespaces": ["a-serve"], "valid_from": "2026-10-01T00:00:00Z",
     "valid_to": "2026-10-15T00:00:00Z", "service_tier": "premium"},
    # from the 15th chat is a batch endpoint: the tier in force at the hour of the tokens counts
    {"endpoint_id": "chat", "owner_tenant_id": "a", "namespaces": ["a-serve"], "valid_from": "2026-10-15T00:00:00Z",
     "service_tier": "batch"},
    {"endpoint_id": "embed", "owner_tenant_id": "a", "namespaces": ["a-serve"], "valid_from": "2026-10-01T00:00:00Z",
     "service_tier": "gold"},  # a tier the card does not price: default rates
]
MID = parse_rfc3339_ms("2026-10-20T00:00:00Z")


def _rows() -> dict:
    return {"from_ms": OCT, "to_ms": NOV, "ratecards": [orjson.dumps([CARD]).decode()], "quotas": [], "credits": [],
            "endpoints": [orjson.dumps(ENDPOINTS).decode()], "suspense": [],
            "windows": [{"version": "tiers-v1", "from_ms": OCT, "to_ms": NOV, "physical": [], "buckets": []}],
            "hourly_tokens": [("b", OCT + H, 2_000_000, 1_000_000, "chat"),   # premium
                              ("b", MID, 4_000_000, 2_000_000, "chat"),       # batch
                              ("c", OCT + H, 1_000_000, 1_000_000, "embed"),  # gold: default
                              ("c", OCT + 2 * H, 1_000_000, 0, "")]}          # no endpoint: default


def test_each_endpoint_s_tier_in_force_prices_its_tokens():
    priced = price_rows(_rows())
    got = {(ln.tenant_id, ln.sku_id): (ln.quantity, ln.rate, ln.amount) for ln in priced.lines if ln.component == "variable"}
    D = Decimal
    assert got == {("b", "premium/input_tokens"): (D(2), D("1.00"), D("2.00")),
                   ("b", "premium/output_tokens"): (D(1), D("3.00"), D("3.00")),
                   ("b", "batch/input_tokens"): (D(4), D("0.10"), D("0.40")),
                   ("b", "batch/output_tokens"): (D(2), D("0.40"), D("0.80")),
                   ("c", "input_tokens"): (D(2), D("0.30"), D("0.60")),
                   ("c", "output_tokens"): (D(1), D("0.90"), D("0.90"))}
    recon = money_reconciliation(priced)
    assert recon["difference"] == 0 and recon["tenant_charges"] == D("7.70") == recon["recoverable_cost"]


def test_tier_documents_are_validated():
    with pytest.raises(RatecardError, match="service_tiers"):
        parse_ratecards([{**CARD, "service_tiers": {"batch": {"input": "0.1", "cached": "0.2"}}}])
    with pytest.raises(RatecardError, match="negative"):
        parse_ratecards([{**CARD, "service_tiers": {"batch": {"input": "-0.1"}}}])
    with pytest.raises(EndpointsError, match="service_tier"):
        parse_endpoints([{**ENDPOINTS[0], "service_tier": "a/b"}])
    assert parse_endpoints([{k: v for k, v in ENDPOINTS[0].items() if k != "service_tier"}])[0].service_tier == ""
