"""The ledger document: canonical hash, corrections as differences, policy refusals."""

from dataclasses import replace
from decimal import Decimal

from gpuledger.domain.ledger import ClosePolicy, content_hash, corrections, refusals
from gpuledger.domain.pricing import Line, Priced

POLICY = ClosePolicy(0.02, 0.01, 0.0)


def _line(tenant="a", component="guaranteed", q="10", rate="2.50"):
    q, rate = Decimal(q), Decimal(rate)
    return Line("tenant", tenant, component, "H100", "gpu_hour", q, rate, q * rate, q * rate, "v1", 0, 10, "x")


def test_hash_is_canonical_and_ignores_status():
    doc = {"format": "gpuledger-ledger/1", "period": "2026-10", "lines": [{"b": 1, "a": "2.50"}], "hash": None,
           "status": "closed"}
    same = {"status": "draft", "hash": "sha256:x", "lines": [{"a": "2.50", "b": 1}], "period": "2026-10",
            "format": "gpuledger-ledger/1"}
    assert content_hash(doc) == content_hash(same)
    assert content_hash(doc) != content_hash({**doc, "period": "2026-11"})


def test_corrections_are_differences_per_line():
    booked = [_line("a", q="10"), _line("b", component="borrowed", q="4", rate="1.50")]
    now = [_line("a", q="13"), _line("b", component="borrowed", q="4", rate="1.50"), _line("c", q="1")]
    out = corrections("2026-10", booked, now)
    assert [(c.tenant_id, c.quantity, c.amount, c.charge_class, c.corrects_period) for c in out] == [
        ("a", Decimal(3), Decimal("7.50"), "Correction", "2026-10"), ("c", Decimal(1), Decimal("2.50"),
                                                                        "Correction", "2026-10")]
    # once booked, nothing is pending
    assert corrections("2026-10", booked + out, now) == []


def test_a_rate_change_reverses_and_rebooks():
    out = corrections("2026-10", [_line(rate="2.50")], [_line(rate="2.00")])
    assert sorted((c.rate, c.amount) for c in out) == [(Decimal("2.00"), Decimal("20.00")),
                                                        (Decimal("2.50"), Decimal("-25.00"))]


def _doc(**recon):
    r = {"physical_gpu_hours": "100.000000", "unattributed_gpu_hours": "0.000000",
         "difference_gpu_hours": "0.000000", "difference_money": "0.00", "recoverable_cost": "250.00", **recon}
    return {"reconciliation": r, "evidence_to": "2026-11-01T00:00:00Z", "period_end": "2026-11-01T00:00:00Z",
            "ratecard_versions": ["v1"], "lines": []}


def test_refusals_name_each_reason():
    end = 1_793_491_200_000  # 2026-11-01
    assert refusals(_doc(), Priced(), POLICY, end) == []
    (why,) = refusals(_doc(unattributed_gpu_hours="3.000000"), Priced(), POLICY, end)
    assert "3.000000 GPU-hours (3.00%) allocated with no tenant identity" in why and "2.00%" in why
    (why,) = refusals(_doc(difference_gpu_hours="-1.500000"), Priced(), POLICY, end)
    assert "not accounted for by evidence" in why
    (why,) = refusals(_doc(), Priced(unpriced_gpu_hours={"A100": 2.0}), POLICY, end)
    assert "A100" in why and "no rate" in why
    late = {**_doc(), "evidence_to": "2026-10-30T00:00:00Z"}
    assert "evidence reaches only 2026-10-30T00:00:00Z" in refusals(late, Priced(), POLICY, end)[0]
    assert "differs" in refusals(_doc(difference_money="0.01"), Priced(), POLICY, end)[0]
    assert "no rate card" in refusals({**_doc(), "ratecard_versions": []}, Priced(), POLICY, end)[0]


def test_correction_description_names_the_period_once():
    (c,) = corrections("2026-10", [], [replace(_line(), description="correction to 2026-10: x")])
    assert c.description == "correction to 2026-10: x"
