"""Two-step close, on the in-memory ledger: prepare, approve by another person, the approval
sealed into the closed document, the evidence hash untouched, and every refusal."""

import pytest

from gpuledger.domain.approval import ApprovalError, approve, prepare, seal_hash, verify
from gpuledger.domain.ledger import content_hash
from gpuledger.ledger.close import approve_period
from gpuledger.sinks.ledger_store import MemoryLedger

T = 1_793_491_200_000  # 2026-11-01T00:00:00Z


def _doc(period: str = "2026-10", amount: str = "10.00") -> dict:
    return {"format": "gpuledger-ledger/1", "period": period, "status": "closed", "hash": None,
            "lines": [{"tenant_id": "acme", "amount": amount}]}


def _prepared(ledger: MemoryLedger, period: str = "2026-10", by: str = "pat", at: int = T) -> dict:
    doc = prepare(_doc(period), by, at, [d for d in ledger.closed() if d["period"] < period])
    ledger.prepare(period, doc["hash"], at, doc)
    return doc


def test_prepare_then_approve_by_another_closes_with_the_approval_sealed():
    ledger = MemoryLedger()
    prepared = _prepared(ledger)
    assert prepared["status"] == "prepared" and ledger.get("2026-10") is None
    result = approve_period(ledger, "2026-10", "quinn", T + 60_000, True)
    doc = result.document
    assert not result.already_closed and ledger.get("2026-10") == doc
    assert doc["status"] == "closed" and doc["hash"] == prepared["hash"] == content_hash(_doc())
    assert doc["approval"] == {"prepared_by": "pat", "prepared_at": "2026-11-01T00:00:00Z", "prepared_against": [],
                               "approved_by": "quinn", "approved_at": "2026-11-01T00:01:00Z"}
    assert verify(doc) == [] and doc["seal"] == seal_hash(doc)
    for edit in ({"approval": {**doc["approval"], "approved_by": "pat"}}, {"status": "prepared"},
                 {"lines": [{"tenant_id": "acme", "amount": "1.00"}]}):
        assert verify({**doc, **edit}), edit


def test_the_preparer_may_not_approve_unless_the_setting_allows_it():
    ledger = MemoryLedger()
    _prepared(ledger)
    with pytest.raises(ApprovalError, match="pat prepared 2026-10 and may not approve it too"):
        approve_period(ledger, "2026-10", "pat", T, True)
    assert ledger.get("2026-10") is None
    assert approve_period(ledger, "2026-10", " pat ", T, False).document["approval"]["approved_by"] == "pat"


def test_approving_again_is_a_no_op_and_the_first_approval_stands():
    ledger = MemoryLedger()
    _prepared(ledger)
    first = approve_period(ledger, "2026-10", "quinn", T, True).document
    again = approve_period(ledger, "2026-10", "rosa", T + 1, True)
    assert again.already_closed and again.document == first and len(ledger.rows) == 1


def test_refusals_name_what_to_do():
    ledger = MemoryLedger()
    with pytest.raises(ApprovalError, match=r"not prepared: run `gpuledger close --period 2026-10` first"):
        approve_period(ledger, "2026-10", "quinn", T, True)
    doc = _prepared(ledger)
    for name in ("", "  ", "a\nb", "x" * 201):
        with pytest.raises(ApprovalError, match="must be named"):
            approve_period(ledger, "2026-10", name, T, True)
    with pytest.raises(ApprovalError, match="does not verify"):
        approve({**doc, "lines": []}, "quinn", T, True)
    with pytest.raises(ApprovalError, match="not prepared"):
        approve({**doc, "status": "closed"}, "quinn", T, True)


def test_a_period_closed_after_preparing_makes_the_prepared_document_stale():
    """November prepared against an open October would book October's corrections again
    once October closes: it is prepared again, and the new one names October."""
    ledger = MemoryLedger()
    _prepared(ledger, "2026-11")
    _prepared(ledger, "2026-10")
    october = approve_period(ledger, "2026-10", "quinn", T, True).document
    with pytest.raises(ApprovalError, match=r"ledger changed since 2026-11 was prepared \(2026-10 sha256:"):
        approve_period(ledger, "2026-11", "quinn", T, True)
    _prepared(ledger, "2026-11", at=T + 5)
    november = approve_period(ledger, "2026-11", "quinn", T + 10, True).document
    assert november["approval"]["prepared_against"] == [f"2026-10 {october['hash']}"]


def test_the_latest_prepared_document_counts():
    ledger = MemoryLedger()
    ledger.prepare("2026-10", "sha256:a", T, {"n": 1})
    ledger.prepare("2026-10", "sha256:b", T + 1, {"n": 2})
    ledger.prepare("2026-10", "sha256:c", T + 1, {"n": 3})  # same time: the later write
    assert ledger.prepared("2026-10") == {"n": 3} and ledger.prepared("2026-09") is None


def test_documents_closed_before_approvals_verify_on_their_hash_alone():
    old = {**_doc(), "hash": content_hash(_doc())}
    assert verify(old) == [] and verify({**old, "lines": []})


def test_a_store_that_refuses_the_login_leaves_the_period_prepared_and_says_who_may_close():
    ledger = MemoryLedger(login_name="gpuledger_worker", refuse_closing=True)
    _prepared(ledger)
    with pytest.raises(ApprovalError, match=r"gpuledger_worker: not enough privileges.*approver role"):
        approve_period(ledger, "2026-10", "quinn", T, True)
    assert ledger.get("2026-10") is None and ledger.prepared("2026-10")["status"] == "prepared"
    ledger.login_name, ledger.refuse_closing = "finops_approver", False
    doc = approve_period(ledger, "2026-10", "quinn", T, True).document
    assert doc["approval"]["approved_login"] == "finops_approver" and verify(doc) == []
    assert verify({**doc, "approval": {**doc["approval"], "approved_login": "gpuledger_worker"}})
