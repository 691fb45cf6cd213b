"""The reference entries in force: the union of every document published, the latest
publication winning per entry key, each entry dated by its own fields; a later document for
other times changes nothing before (domain/reference_history.py)."""

from __future__ import annotations

from decimal import Decimal

import orjson

from gpuledger.domain.cost import card_windows
from gpuledger.domain.quota import quota_in_force
from gpuledger.domain.reference_history import documents_used, in_force
from gpuledger.domain.rows import canonical_sha256, documents_in_force, parsed, price_rows
from gpuledger.domain.showback import build_showback
from gpuledger.domain.suspense import in_force as decisions_in_force
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
OCT, NOV, DEC = (parse_rfc3339_ms(f"2026-{m}-01T00:00:00Z") for m in ("10", "11", "12"))
JAN = parse_rfc3339_ms("2027-01-01T00:00:00Z")


def card(version: str, valid_from: str, guaranteed: str = "2.50", valid_to: str | None = None) -> dict:
    return {"version": version, "valid_from": valid_from, "valid_to": valid_to, "currency": "USD",
            "gpu_hour": {"H100": {"guaranteed": guaranteed, "borrowed": "1.50"}}}


def doc(*entries: dict) -> str:
    return orjson.dumps(list(entries)).decode()


OCT_CARDS = doc(card("2026-10-v1", "2026-10-01T00:00:00Z"))
DEC_CARDS = doc(card("2026-12-v1", "2026-12-01T00:00:00Z", "3.00"))


def versions(windows: list) -> list[tuple]:
    return [(c.version if c else None, a, b) for c, a, b in windows]


def test_a_card_for_december_leaves_the_cards_before_it_in_force():
    cards = in_force("ratecards", [DEC_CARDS, OCT_CARDS]).parsed  # the latest publication first
    assert [c.version for c in cards] == ["2026-10-v1", "2026-12-v1"]
    assert versions(card_windows(cards, OCT, NOV)) == [("2026-10-v1", OCT, NOV)]
    assert versions(card_windows(cards, NOV, JAN)) == [("2026-10-v1", NOV, DEC), ("2026-12-v1", DEC, JAN)]


def test_the_latest_publication_of_a_card_version_wins():
    corrected = doc(card("2026-10-v1", "2026-10-01T00:00:00Z", "2.75"))
    force = in_force("ratecards", [corrected, DEC_CARDS, OCT_CARDS])
    assert {c.version: c.gpu_hour["H100"]["guaranteed"] for c in force.parsed} == {
        "2026-10-v1": Decimal("2.75"), "2026-12-v1": Decimal("3.00")}
    assert documents_used(force, OCT, NOV) == [corrected]  # the first October document priced nothing
    assert documents_used(force, DEC, JAN) == [DEC_CARDS]  # October's card is valid on, outlasted from Dec 1
    assert documents_used(force, NOV, JAN) == [DEC_CARDS, corrected]
    # published again after the correction, the original wins again
    assert in_force("ratecards", [OCT_CARDS, corrected, DEC_CARDS]).parsed[0].gpu_hour["H100"]["guaranteed"] == \
        Decimal("2.50")


def test_of_two_cards_valid_from_the_same_instant_the_later_published_prices():
    a, b = doc(card("a", "2026-10-01T00:00:00Z")), doc(card("b", "2026-10-01T00:00:00Z"))
    for later, earlier in ((b, a), (a, b)):
        force = in_force("ratecards", [later, earlier])
        assert versions(card_windows(force.parsed, OCT, NOV)) == [(orjson.loads(later)[0]["version"], OCT, NOV)]
        assert documents_used(force, OCT, NOV) == [later]


def quota(tenant: str, gpus: float, valid_from: str, valid_to: str | None = None) -> dict:
    return {"tenant_id": tenant, "gpu_class": "H100", "guaranteed_gpus": gpus, "valid_from": valid_from,
            "valid_to": valid_to}


def test_quotas_are_kept_per_tenant_class_and_start():
    first = doc(quota("alpha", 2, "2026-10-01T00:00:00Z"), quota("beta", 1, "2026-10-01T00:00:00Z"))
    # alpha's quota grows from December; beta is not named again and keeps its quota
    december = doc(quota("alpha", 3, "2026-12-01T00:00:00Z"))
    quotas = in_force("quotas", [december, first]).parsed

    def at(tenant: str, t_ms: int) -> float:
        q = quota_in_force([q for q in quotas if q.tenant_id == tenant], t_ms)
        return q.guaranteed_gpus if q else 0.0

    assert (at("alpha", OCT + H), at("alpha", DEC + H), at("beta", DEC + H)) == (2.0, 3.0, 1.0)
    # the same tenant, class and start published again: the later wins; ended with a valid_to
    again = doc(quota("alpha", 4, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"))
    quotas = in_force("quotas", [again, december, first]).parsed
    assert (at("alpha", OCT + H), at("alpha", NOV + H), at("alpha", DEC + H)) == (4.0, 0.0, 3.0)
    force = in_force("quotas", [again, december, first])
    assert documents_used(force, NOV, DEC) == [first]  # beta's; alpha's quota of October ended
    assert documents_used(force, OCT, JAN) == [first, december, again]
    # alpha's first quota, open-ended, is outlasted from December by the one starting then
    assert documents_used(in_force("quotas", [december, first]), DEC, JAN) == [first, december]
    assert documents_used(in_force("quotas", [december, doc(quota("alpha", 2, "2026-10-01T00:00:00Z"))]),
                          DEC, JAN) == [december]


def test_credits_are_kept_by_id_and_apply_to_their_period():
    october = doc({"credit_id": "c1", "tenant_id": "alpha", "period": "2026-10", "amount": "100"})
    december = doc({"credit_id": "c2", "tenant_id": "alpha", "period": "2026-12", "amount": "50"})
    force = in_force("credits", [december, october])
    assert {(c.credit_id, c.amount) for c in force.parsed} == {("c1", Decimal("100")), ("c2", Decimal("50"))}
    assert documents_used(force, OCT, NOV) == [october] and documents_used(force, NOV, DEC) == []
    assert documents_used(force, DEC, JAN) == [december]
    raised = doc({"credit_id": "c1", "tenant_id": "alpha", "period": "2026-10", "amount": "120"})
    force = in_force("credits", [raised, december, october])
    assert {(c.credit_id, c.amount) for c in force.parsed} == {("c1", Decimal("120")), ("c2", Decimal("50"))}
    assert documents_used(force, OCT, NOV) == [raised]


def test_endpoint_declarations_are_kept_per_endpoint_and_start():
    first = doc({"endpoint_id": "chat", "owner_tenant_id": "a", "namespaces": ["a-serve"],
                 "valid_from": "2026-10-01T00:00:00Z"})
    moved = doc({"endpoint_id": "chat", "owner_tenant_id": "b", "namespaces": ["b-serve"],
                 "valid_from": "2026-12-01T00:00:00Z"})
    declared = in_force("endpoints", [moved, first]).parsed
    assert [(d.owner_tenant_id, d.in_force(OCT + H), d.in_force(DEC + H)) for d in declared] == [
        ("b", False, True), ("a", True, True)]


def test_suspense_decisions_are_kept_by_id():
    a1 = {"assignment_id": "a1", "period": "2026-10", "tenant_id": "t", "to": "central", "reason": "r", "by": "x",
          "at": "2026-11-02T00:00:00Z"}
    a2 = {**a1, "assignment_id": "a2", "period": "2026-11", "to": "u", "at": "2026-12-02T00:00:00Z"}
    first, grown = doc(a1), doc(a1, a2)  # `suspense assign` publishes the whole list, grown by one
    force = in_force("suspense", [grown, first])
    assert [a.assignment_id for a in force.parsed] == ["a1", "a2"]
    assert set(decisions_in_force(force.parsed)) == {("2026-10", "t", "", None), ("2026-11", "t", "", None)}
    assert documents_used(force, OCT, NOV) == [grown]
    # a list published without an earlier decision does not undo it (a release does)
    force = in_force("suspense", [doc(a2), first])
    assert set(decisions_in_force(force.parsed)) == {("2026-10", "t", "", None), ("2026-11", "t", "", None)}
    assert documents_used(force, OCT, NOV) == [first] and documents_used(force, NOV, DEC) == [doc(a2)]


def test_a_document_that_does_not_parse_adds_nothing():
    broken = doc({**card("2026-10-v1", "2026-10-01T00:00:00Z"), "gpu_hour": {"H100": {"guaranteed": "-1"}}})
    force = in_force("ratecards", [broken, "not json", DEC_CARDS, OCT_CARDS])
    assert [c.version for c in force.parsed] == ["2026-10-v1", "2026-12-v1"]
    assert force.documents == (DEC_CARDS, OCT_CARDS)
    assert in_force("quotas", []).parsed == [] and documents_used(in_force("quotas", []), OCT, NOV) == []


def _october(ratecards: list[str]) -> dict:
    """Query rows of October as sinks/showback_sql.py reads them: 2 H100s, tenant t holding one
    all month (quota 1: guaranteed), the card windows cut from the cards in force."""
    rows = {"from_ms": OCT, "to_ms": NOV, "as_of_ms": NOV, "physical": [(2 * 744.0,)],
            "tenant_capacity": [("t", "exclusive", "high", 744.0)], "tenant_utilization": [],
            "platform_capacity": [], "unattributed_samples": [], "endpoint_capacity": [], "endpoint_usage": [],
            "productive_work": [], "ratecards": ratecards, "quotas": [doc(quota("t", 1, "2026-10-01T00:00:00Z"))],
            "held": [("t", "H100", "H100", OCT, NOV, 1.0, "high")]}
    rows["windows"] = [{"version": c.version if c else None, "from_ms": a, "to_ms": b,
                        "physical": [("H100", 2 * (b - a))], "buckets": []}
                       for c, a, b in card_windows(parsed(rows, "ratecards"), OCT, NOV)]
    return rows


def test_october_is_priced_and_named_alike_before_and_after_a_december_card():
    before, after = _october([OCT_CARDS]), _october([DEC_CARDS, OCT_CARDS])
    shown = [build_showback(rows, priced=price_rows(rows)) for rows in (before, after)]
    assert shown[0]["ratecard_version"] == shown[1]["ratecard_version"] == "2026-10-v1"
    lines = [sorted((ln.tenant_id, ln.component, ln.sku_id, ln.quantity, ln.amount) for ln in price_rows(r).lines)
             for r in (_october([OCT_CARDS]), _october([DEC_CARDS, OCT_CARDS]))]
    assert lines[0] == lines[1] and ("t", "guaranteed", "H100", Decimal(744), Decimal("1860.00")) in lines[0]
    assert documents_in_force(before) == documents_in_force(after) == {
        "ratecards": [canonical_sha256(orjson.loads(OCT_CARDS))],
        "quotas": [canonical_sha256([quota("t", 1, "2026-10-01T00:00:00Z")])],
        "credits": [], "endpoints": [], "suspense": []}
    december = {**_october([DEC_CARDS, OCT_CARDS]), "from_ms": DEC, "to_ms": JAN}
    assert documents_in_force(december)["ratecards"] == [canonical_sha256(orjson.loads(DEC_CARDS))]
