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
    assert force[("2026-10", "b", None)].to == "central" and force[("2026-10", "b", "H100")].to == "b"
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
