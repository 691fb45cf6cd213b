"""The closed document keeps each tenant's measurements, exact: the GPU-hours the cluster took
back per outcome and per GPU class (held and borrowed), and the successful requests and
output tokens served on guaranteed or borrowed capacity — from query rows, through the
showback and the pricing, to the document ``close`` hashes.

One day, Oct 1. alpha (quota 1 H100) holds H100 p1 (the chat endpoint) 0..10 h, H100 p2 (2
GPUs) 2..6 h, which the scheduler preempted, and A100 p3 1..4 h, which the cluster evicted.
2..6 h alpha holds 3 H100s against a quota of 1: a third of each is guaranteed, so p2 held 8
GPU-hours, 16/3 of them borrowed; alpha has no A100 quota: p3's 3 GPU-hours are borrowed.
beta sends chat 100 requests (1,000 output tokens) in hour 0, when alpha holds 1 H100 (nothing
borrowed), and 60 (600) in hour 3, when it holds 3 (2/3 borrowed): 120 requests and 1,200
tokens on guaranteed capacity, 40 and 400 on borrowed.
"""

from decimal import Decimal

import orjson

from gpuledger.domain.cost import card_windows, parse_ratecards
from gpuledger.domain.ledger import build_ledger
from gpuledger.domain.pricing import rounded
from gpuledger.domain.rows import price_rows
from gpuledger.domain.showback import build_showback
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")
T1 = T0 + 24 * H
CARDS = [{"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": None, "currency": "EUR",
          "gpu_hour": {"H100": {"guaranteed": "3.00", "borrowed": "2.00"},
                       "A100": {"guaranteed": "2.00", "borrowed": "1.00"}}}]
QUOTAS = [{"tenant_id": "alpha", "gpu_class": "H100", "guaranteed_gpus": 1, "valid_from": "2026-10-01T00:00:00Z"}]
ENDPOINTS = [{"endpoint_id": "chat", "owner_tenant_id": "alpha", "namespaces": ["alpha-serve"],
              "valid_from": "2026-10-01T00:00:00Z"}]
HELD = [("alpha", "H100", "H100", T0, T0 + 10 * H, 1.0, "high", "p1"),
        ("alpha", "H100", "H100", T0 + 2 * H, T0 + 6 * H, 2.0, "high", "p2"),
        ("alpha", "A100", "A100", T0 + H, T0 + 4 * H, 1.0, "high", "p3")]


def _rows() -> dict:
    """Query rows as sinks/showback_sql.py returns them for 4 H100s and 2 A100s."""
    windows = [{"version": card.version, "from_ms": a, "to_ms": b, "physical": [("A100", 2 * (b - a)), ("H100", 4 * (b - a))],
                "buckets": []} for card, a, b in card_windows(parse_ratecards(CARDS), T0, T1)]
    return {"from_ms": T0, "to_ms": T1, "as_of_ms": T1, "physical": [(6 * 24.0,)],
            "tenant_capacity": [("alpha", "exclusive", "high", 21.0)], "tenant_utilization": [("alpha", 21.0, 21.0)],
            "platform_capacity": [("allocated", False, 21.0), ("unallocated", False, 6 * 24.0 - 21.0)],
            "unattributed_samples": [], "endpoint_capacity": [("chat", "alpha", "alpha-serve", 10.0)],
            "endpoint_intervals": [("chat", "alpha", "H100", T0, T0 + 10 * H, 1.0, "alpha-serve")],
            "endpoint_usage": [("chat", "beta", 160, 160, 0, 1_600)],
            "hourly_endpoint_work": [("beta", T0, "chat", 100, 1_000), ("beta", T0 + 3 * H, "chat", 60, 600)],
            "productive_work": [], "held": HELD, "disrupted_pods": [("p2", "preempted"), ("p3", "evicted")],
            "ratecards": [orjson.dumps(CARDS).decode()], "quotas": [orjson.dumps(QUOTAS).decode()],
            "endpoints": [orjson.dumps(ENDPOINTS).decode()], "windows": windows}


def _document() -> dict:
    rows = _rows()
    priced = price_rows(rows)
    showback = build_showback(rows, priced=priced)
    return build_ledger("2026-10", T0, T1, showback, priced, rounded(priced.lines), [], {
        "currency": showback["currency"], "ratecard_versions": ["v1"], "hierarchy": (), "sources": [],
        "dead_lettered": 0, "evidence_to_ms": T1})


def test_the_document_keeps_reclaimed_gpu_hours_per_outcome_and_gpu_class():
    tenants = {t["tenant_id"]: t for t in _document()["tenants"]}
    assert tenants["alpha"]["reclaimed_gpu_hours"] == {
        "preempted": "8.000000", "preempted_borrowed": "5.333333", "evicted": "3.000000", "evicted_borrowed": "3.000000",
        "by_class": {"A100": {"evicted": "3.000000", "evicted_borrowed": "3.000000"},
                     "H100": {"preempted": "8.000000", "preempted_borrowed": "5.333333"}}}
    assert "reclaimed_gpu_hours" not in tenants["beta"]  # none of its pods was ended by the cluster


def test_the_document_keeps_productive_work_by_capacity():
    tenants = {t["tenant_id"]: t for t in _document()["tenants"]}
    assert tenants["beta"]["productive_by_capacity"] == {
        "guaranteed": {"successful_requests": "120.000000", "output_tokens": "1200.000000"},
        "borrowed": {"successful_requests": "40.000000", "output_tokens": "400.000000"},
        "unknown": {"successful_requests": "0.000000", "output_tokens": "0.000000"}}
    # the owner's own hours are what the split is taken from; it served no requests of its own
    assert "productive_by_capacity" not in tenants["alpha"]
    # H100: 2 of the 3 held over 2..6 h; A100: 3 h
    assert Decimal(tenants["alpha"]["borrowed_gpu_hours"]) == Decimal("8.000000") + Decimal("3.000000")
