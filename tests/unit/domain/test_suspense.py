"""Suspense: hours of a confidence the policy does not bill are priced at the list rate as
suspense (no tenant pays them), both reconciliation identities hold, and a decision settles
them to a tenant or central without changing any total (domain/suspense.py)."""

from decimal import Decimal

import pytest

from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.pricing import WindowCapacity, price, rounded
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.rows import money_reconciliation
from gpuledger.domain.suspense import (BILL_CONFIDENCE, check_bill_confidence, in_force, parse_assignments,
                                       settle)
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
OCT = parse_rfc3339_ms("2026-10-01T00:00:00Z")
NOV = parse_rfc3339_ms("2026-11-01T00:00:00Z")
CARD = parse_ratecards([{"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                         "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"}}}])[0]
QUOTAS = parse_quotas([{"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1,
                        "valid_from": "2026-10-01T00:00:00Z"}])
# a: 1 GPU for 10 h (high); b: a quarter of a time-sliced GPU for 8 h (modeled) and 1 GPU 3 h (medium)
HELD = [("a", "H100", "H100", OCT, OCT + 10 * H, 1.0, "high"),
        ("b", "H100", "H100", OCT, OCT + 8 * H, 0.25, "modeled"),
        ("b", "H100", "H100", OCT + 2 * H, OCT + 5 * H, 1.0, "medium")]
PHYSICAL = 2


def _priced(bill=BILL_CONFIDENCE, decisions=()):
    window = NOV - OCT
    cap = WindowCapacity(OCT, NOV, {"H100": PHYSICAL * window},
                         {("H100", "unallocated"): PHYSICAL * window / H - 10 - 2 - 3})
    priced = price([(CARD, cap)], HELD, QUOTAS, [], [], [], [], (OCT, NOV), bill)
    priced.lines = settle(priced.lines, parse_assignments(list(decisions)))
    return priced


def _identities(priced):
    micro = priced.micro_gpu_hours
    assert micro["physical"] == micro["tenant"] + micro["suspense"] + micro["unattributed"] + micro["unallocated"] \
        + micro["fragmentation"] + micro["unavailable"] + micro["unreconciled"]
    money = money_reconciliation(priced)
    assert money["difference"] == 0
    assert money["recoverable_cost"] == money["tenant_charges"] + money["central_charges"] + money["subsidies"] \
        + money["suspense"] - money["credits"]
    return micro, money


def _decision(n, to, at="2026-11-03T10:00:00Z", sku="H100", tenant="b"):
    return {"assignment_id": f"d{n}", "period": "2026-10", "tenant_id": tenant, "sku_id": sku, "to": to,
            "reason": "time-slice share confirmed by the team lead", "by": "fin-ops", "at": at}


def test_modeled_hours_are_suspense_not_tenant_charges():
    priced = _priced()
    micro, money = _identities(priced)
    assert micro["suspense"] == 2_000_000  # 8 h x 0.25
    assert money["suspense"] == Decimal("5.00")  # 2 h at the 2.50 list rate
    suspense = [ln for ln in priced.lines if ln.payer == "suspense"]
    assert [(ln.tenant_id, ln.quantity) for ln in suspense] == [("b", Decimal(2))]
    b_paid = sum(ln.amount for ln in priced.lines if ln.payer == "tenant" and ln.tenant_id == "b")
    assert b_paid == Decimal("5.25")  # only the medium 3 h, borrowed at 1.75
    # allocation is measured on every held hour: only billing leaves the suspense out
    assert priced.tenant_hours[("b", "H100")] == pytest.approx((0.0, 5.0))


def test_billing_every_class_charges_the_tenant_instead():
    everything = _priced(bill=("high", "medium", "modeled"))
    _, money = _identities(everything)
    assert money["suspense"] == 0
    default = money_reconciliation(_priced())
    assert money["recoverable_cost"] == default["recoverable_cost"]
    assert money["tenant_charges"] > default["tenant_charges"]


def test_an_assignment_books_the_hours_and_keeps_both_identities():
    before = money_reconciliation(_priced())
    priced = _priced(decisions=[_decision(1, "b")])
    _, money = _identities(priced)
    assert money["suspense"] == 0
    assert money["tenant_charges"] == before["tenant_charges"] + Decimal("5.00")
    booked = [ln for ln in priced.lines if ln.component == "suspense_assigned"]
    assert [(ln.payer, ln.tenant_id, ln.amount) for ln in booked] == [("tenant", "b", Decimal("5.00"))]
    assert "fin-ops" in booked[0].description and "d1" in booked[0].description


def test_to_central_then_release_then_reassign():
    central = _priced(decisions=[_decision(1, "central")])
    _, money = _identities(central)
    assert money["central_charges"] == money_reconciliation(_priced())["central_charges"] + Decimal("5.00")
    released = _priced(decisions=[_decision(1, "central"), _decision(2, "suspense", at="2026-11-04T10:00:00Z")])
    assert money_reconciliation(released)["suspense"] == Decimal("5.00")
    again = _priced(decisions=[_decision(1, "central"), _decision(2, "suspense", at="2026-11-04T10:00:00Z"),
                               _decision(3, "a", at="2026-11-05T10:00:00Z")])
    assert [(ln.payer, ln.tenant_id) for ln in again.lines if ln.component == "suspense_assigned"] == [("tenant", "a")]


def test_a_decision_for_one_sku_wins_over_one_for_all_and_the_latest_wins():
    decisions = parse_assignments([_decision(1, "central", sku=None), _decision(2, "b", at="2026-11-02T00:00:00Z")])
    force = in_force(decisions)
    assert force[("2026-10", "b", "", None)].to == "central" and force[("2026-10", "b", "", "H100")].to == "b"
    booked = [ln for ln in _priced(decisions=[_decision(1, "central", sku=None),
                                              _decision(2, "b", at="2026-11-02T00:00:00Z")]).lines
              if ln.component == "suspense_assigned"]
    assert [ln.payer for ln in booked] == ["tenant"]


def test_rounded_lines_still_reconcile():
    priced = _priced(decisions=[_decision(1, "b")])
    assert money_reconciliation(priced, rounded(priced.lines))["difference"] == 0


@pytest.mark.parametrize("bad, why", [
    ({"period": "2026-10", "tenant_id": "b", "to": "a", "reason": "x", "by": "y", "at": "2026-11-01T00:00:00Z"},
     "assignment_id"),
    ({**_decision(1, "a"), "reason": " "}, "reason"),
    ({**_decision(1, "a"), "by": ""}, "by"),
    ({**_decision(1, "a"), "period": "October"}, "period"),
])
def test_bad_decisions_are_refused_with_the_reason(bad, why):
    with pytest.raises(ValueError, match=why):
        parse_assignments([bad])


def test_duplicate_decision_ids_and_unknown_classes_are_refused():
    with pytest.raises(ValueError, match="twice"):
        parse_assignments([_decision(1, "a"), _decision(1, "b")])
    with pytest.raises(ValueError, match="unknown confidence"):
        check_bill_confidence(["high", "certain"])
    assert check_bill_confidence(["modeled", "high"]) == ("high", "modeled")


def test_hours_without_telemetry_bill_or_go_to_suspense_by_policy():
    """a holds 2 GPUs for 10 h; its telemetry covered 3/4 of the interval: under the default
    policy all 20 h bill; with telemetry_unknown = suspense, 5 h are under review and 15 bill."""
    from gpuledger.domain.cost import parse_ratecards
    from gpuledger.domain.pricing import WindowCapacity, price
    from gpuledger.domain.suspense import billing_classes

    oct_, nov = parse_rfc3339_ms("2026-10-01T00:00:00Z"), parse_rfc3339_ms("2026-11-01T00:00:00Z")
    card = parse_ratecards([{"version": "v", "valid_from": "2026-10-01T00:00:00Z",
                             "gpu_hour": {"H100": {"guaranteed": "2.00", "borrowed": "2.00"}}}])[0]
    held = [("a", "H100", "H100", oct_, oct_ + 10 * 3_600_000, 2.0, "high", "pod-1", 0.75)]
    cap = WindowCapacity(oct_, nov, {"H100": 2 * (nov - oct_)}, {("H100", "unallocated"): 2 * 744 - 20.0})
    for policy, billed, review in (("bill", 20, 0), ("suspense", 15, 5)):
        priced = price([(card, cap)], held, [], [], [], [], [], (oct_, nov), billing_classes(["high"], policy))
        got = {}
        for ln in priced.lines:
            if ln.tenant_id == "a":
                got[ln.payer] = got.get(ln.payer, 0) + ln.quantity
        assert (got.get("tenant", 0), got.get("suspense", 0)) == (billed, review), policy
    with pytest.raises(ValueError, match="telemetry_unknown"):
        billing_classes(["high"], "ignore")


# Unattributed capacity of the same October: namespace ml-x held 1 GPU 6 h and VM vm-7 held half
# a GPU 4 h with no tenant known: 8 h, of the 1,473 h that were unallocated above.
UNATTRIBUTED = (("H100", "H100", "namespace/ml-x", 6.0), ("H100", "H100", "vm/vm-7", 2.0))


def _with_unattributed(bill=BILL_CONFIDENCE, decisions=()):
    window = NOV - OCT
    cap = WindowCapacity(OCT, NOV, {"H100": PHYSICAL * window},
                         {("H100", "unallocated"): PHYSICAL * window / H - 10 - 2 - 3 - 8,
                          ("H100", "unattributed"): 8.0}, unattributed=UNATTRIBUTED)
    priced = price([(CARD, cap)], HELD, QUOTAS, [], [], [], [], (OCT, NOV), bill)
    priced.lines = settle(priced.lines, parse_assignments(list(decisions)))
    return priced


def _holder_decision(n, to, holder="namespace/ml-x", at="2026-11-03T10:00:00Z", sku=None):
    return {"assignment_id": f"u{n}", "period": "2026-10", "holder": holder, "sku_id": sku, "to": to,
            "reason": "ml-x is the vision team's scratch namespace", "by": "fin-ops", "at": at}


def test_unattributed_hours_are_suspense_per_holder_by_default():
    """Recoverable 1,488 h x 2.50 = 3,720.00 = tenants 30.25 (a 10 h guaranteed x 2.50, b's
    medium 3 h borrowed x 1.75) + central 3,662.50 (1,465 h unallocated) + subsidies 2.25 +
    suspense 25.00 (b's modeled 2 h = 5.00, ml-x 6 h = 15.00, vm-7 2 h = 5.00)."""
    priced = _with_unattributed()
    micro, money = _identities(priced)
    assert (micro["suspense"], micro["unattributed"], micro["unattributed_suspense"]) == (2_000_000, 8_000_000,
                                                                                          8_000_000)
    assert {k: money[k] for k in ("recoverable_cost", "tenant_charges", "central_charges", "subsidies",
                                  "suspense")} == {
        "recoverable_cost": Decimal("3720.00"), "tenant_charges": Decimal("30.25"),
        "central_charges": Decimal("3662.50"), "subsidies": Decimal("2.25"), "suspense": Decimal("25.00")}
    review = sorted((ln.tenant_id, ln.holder, ln.quantity, ln.amount) for ln in priced.lines if ln.payer == "suspense")
    assert review == [("", "namespace/ml-x", Decimal(6), Decimal("15.00")),
                      ("", "vm/vm-7", Decimal(2), Decimal("5.00")), ("b", "", Decimal(2), Decimal("5.00"))]


def test_unattributed_hours_assigned_to_a_tenant_or_to_central_keep_both_identities():
    before = money_reconciliation(_with_unattributed())
    priced = _with_unattributed(decisions=[_holder_decision(1, "a"),
                                           _holder_decision(2, "central", holder="vm/vm-7", sku="H100")])
    _, money = _identities(priced)
    assert money["suspense"] == Decimal("5.00")  # b's modeled hours only
    assert money["tenant_charges"] == before["tenant_charges"] + Decimal("15.00")
    assert money["central_charges"] == before["central_charges"] + Decimal("5.00")
    booked = sorted((ln.payer, ln.tenant_id, ln.holder, ln.quantity, ln.amount) for ln in priced.lines
                    if ln.component == "suspense_assigned")
    assert booked == [("central", "", "vm/vm-7", Decimal(2), Decimal("5.00")),
                      ("tenant", "a", "namespace/ml-x", Decimal(6), Decimal("15.00"))]
    (to_a,) = [ln for ln in priced.lines if ln.tenant_id == "a" and ln.component == "suspense_assigned"]
    assert "held by namespace/ml-x with no tenant assigned to a by fin-ops" in to_a.description
    # a tenant's decision never settles a holder's hours, nor the other way round
    tenant_only = _with_unattributed(decisions=[_decision(1, "a", sku=None)])
    assert money_reconciliation(tenant_only)["suspense"] == Decimal("20.00")


def test_unattributed_hours_to_central_by_policy_are_one_central_line():
    from gpuledger.domain.suspense import billing_classes

    priced = _with_unattributed(bill=billing_classes(["high", "medium"], "bill", "central"))
    micro, money = _identities(priced)
    assert (micro["unattributed"], micro["unattributed_suspense"]) == (8_000_000, 0)
    assert money["suspense"] == Decimal("5.00") and money["central_charges"] == Decimal("3682.50")
    with pytest.raises(ValueError, match="unattributed policy"):
        billing_classes(["high"], "bill", "tenant")


def test_the_closed_document_records_the_unattributed_policy_and_older_ones_read_as_central():
    from gpuledger.domain.ledger import _policy_doc, billing_policy
    from gpuledger.domain.pricing import TELEMETRY_UNKNOWN, UNATTRIBUTED_TO_CENTRAL

    assert _policy_doc(BILL_CONFIDENCE) == {"bill_confidence": ["high", "medium"], "telemetry_unknown": "bill",
                                            "unattributed": "suspense"}
    assert billing_policy({"billing_policy": _policy_doc(BILL_CONFIDENCE)}) == BILL_CONFIDENCE
    # closed before the policy named unattributed capacity: it went to central, and is priced so again
    older = {"billing_policy": {"bill_confidence": ["high", "medium"], "telemetry_unknown": "bill"}}
    assert billing_policy(older) == ("high", "medium", TELEMETRY_UNKNOWN, UNATTRIBUTED_TO_CENTRAL)
    # priced again under that policy, it records the policy as it was: the replay's hash is the same
    assert _policy_doc(billing_policy(older)) == older["billing_policy"]
    assert "unattributed" not in _policy_doc(None)


def test_a_holder_assignment_after_the_close_is_corrections_that_keep_the_holder():
    from gpuledger.domain.ledger import corrections, line_doc, line_from_doc

    closed = [line_from_doc(line_doc(ln)) for ln in rounded(_with_unattributed().lines)]
    assert {ln.holder for ln in closed} == {"", "namespace/ml-x", "vm/vm-7"}
    assert "holder" not in line_doc(next(ln for ln in closed if not ln.holder))  # other lines are as before
    now = rounded(_with_unattributed(decisions=[_holder_decision(1, "b")]).lines)
    fixes = [(ln.payer, ln.tenant_id, ln.holder, ln.component, ln.amount) for ln in corrections("2026-10", closed, now)]
    assert fixes == [("suspense", "", "namespace/ml-x", "suspense", Decimal("-15.00")),
                     ("tenant", "b", "namespace/ml-x", "suspense_assigned", Decimal("15.00"))]


def test_a_decision_names_a_tenant_or_a_holder():
    (d,) = parse_assignments([_holder_decision(1, "a")])
    assert (d.tenant_id, d.holder, d.sku_id) == ("", "namespace/ml-x", None)
    with pytest.raises(ValueError, match="exactly one of tenant_id"):
        parse_assignments([{**_holder_decision(1, "a"), "tenant_id": "b"}])
    with pytest.raises(ValueError, match="exactly one of tenant_id"):
        parse_assignments([{k: v for k, v in _decision(1, "a").items() if k != "tenant_id"}])


def test_a_list_that_drops_or_changes_recorded_decisions_is_a_rewrite():
    from gpuledger.domain.suspense import rewritten

    recorded = parse_assignments([_decision(1, "a"), _holder_decision(2, "central"), _decision(3, "b")])
    appended = parse_assignments([_decision(1, "a"), _holder_decision(2, "central"), _decision(3, "b"),
                                  _decision(4, "suspense", at="2026-11-09T00:00:00Z")])
    assert rewritten(recorded, appended) == []
    assert rewritten(recorded, recorded[1:]) == ["d1"]
    changed = parse_assignments([_decision(1, "a"), _holder_decision(2, "a"), {**_decision(3, "b"), "by": "someone"}])
    assert rewritten(recorded, changed) == ["u2", "d3"]
