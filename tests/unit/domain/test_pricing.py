"""Pricing: the class partition adds up to physical in micro-GPU-hours, every part is priced,
and recoverable cost = tenant charges + central charges + subsidies - credits, exactly."""

from decimal import Decimal
from fractions import Fraction

from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.pricing import Credit, WindowCapacity, price, rounded
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.rows import money_reconciliation
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
OCT = parse_rfc3339_ms("2026-10-01T00:00:00Z")
NOV = parse_rfc3339_ms("2026-11-01T00:00:00Z")
CARD = parse_ratecards([{"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                         "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"}},
                         "per_million_tokens": {"input": "0.30", "output": "0.90"},
                         "overhead": {"amount": "100.00"}}])[0]
QUOTAS = parse_quotas([{"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1,
                        "valid_from": "2026-10-01T00:00:00Z"}])


def _priced(physical_gpus=4, credits=(), unreconciled_h=0.0, classes=("H100",), reverse_rows=False):
    held = [("a", "H100", "H100", OCT, OCT + 10 * H, 2.0),  # a: 1 guaranteed + 1 borrowed for 10 h
            ("a", "H100", "H100/3g.40gb", OCT, OCT + 7 * H, 3 / 7),
            ("b", "H100", "H100", OCT + 2 * H, OCT + 5 * H, 1.0)]
    held += [("c", "A100", "A100", OCT, OCT + H, 1.0)] if "A100" in classes else []
    if reverse_rows:  # rows come from a query: their order is not part of the evidence
        held.reverse()
    window = NOV - OCT
    cap = WindowCapacity(OCT, NOV, {"H100": physical_gpus * window}, {
        ("H100", "unallocated"): physical_gpus * window / H - 20 - 3 - 3 - 4 - unreconciled_h,
        ("H100", "unavailable"): 4.0, ("H100", "fragmentation"): 0.0, ("H100", "unattributed"): 0.0})
    return price([(CARD, cap)], held, QUOTAS, [("a", OCT, 2_000_000, 1_000_000), ("b", OCT + H, 500_000, 0)],
                 [], [], list(credits), (OCT, NOV))


def test_partition_and_money_reconcile_exactly():
    priced = _priced(credits=[Credit("c1", "b", "2026-10", Decimal("5.00"), "goodwill")])
    micro = priced.micro_gpu_hours
    assert micro["physical"] == 4 * 744 * 1_000_000
    assert micro["physical"] == micro["tenant"] + micro["unattributed"] + micro["unallocated"] + micro[
        "fragmentation"] + micro["unavailable"] + micro["unreconciled"]
    assert micro["unreconciled"] == 0
    money = money_reconciliation(priced)
    assert money["difference"] == 0
    assert money["recoverable_cost"] == money["tenant_charges"] + money["central_charges"] + money[
        "subsidies"] - money["credits"]
    assert money["credits"] == Decimal("5.00")
    # whole-GPU and MIG hours share a's quota per instant: 1 of its 2 3/7 GPUs is guaranteed
    lines = {(ln.tenant_id, ln.component, ln.sku_id): ln for ln in priced.lines}
    g = lines[("a", "guaranteed", "H100")].quantity + lines[("a", "guaranteed", "H100/3g.40gb")].quantity
    assert g == Decimal(10)
    assert lines[("b", "borrowed", "H100")].quantity == Decimal(3)
    assert lines[("b", "subsidy", "H100")].amount == Decimal("2.25")  # 3 h x (2.50 - 1.75), paid centrally
    assert lines[("a", "variable", "input_tokens")].amount == Decimal("0.60")


def test_rounded_lines_add_up_to_the_rounded_exact_total():
    priced = _priced()
    shown = rounded(priced.lines)
    assert sum(ln.amount for ln in shown) == sum(ln.amount for ln in priced.lines).quantize(Decimal("0.01"))
    assert all(ln.amount == ln.amount.quantize(Decimal("0.01")) for ln in shown)


def test_missing_evidence_is_an_unreconciled_central_line():
    priced = _priced(unreconciled_h=6.0)
    assert priced.micro_gpu_hours["unreconciled"] == 6_000_000
    (line,) = [ln for ln in priced.lines if ln.component == "unreconciled"]
    assert (line.payer, line.quantity, line.amount) == ("central", Decimal(6), Decimal("15.00"))
    assert money_reconciliation(priced)["difference"] == 0


def test_a_class_without_a_rate_is_unpriced_not_free():
    priced = _priced(classes=("H100", "A100"))
    assert priced.unpriced_gpu_hours == {"A100": 1.0}
    assert not [ln for ln in priced.lines if ln.sku_id == "A100"]


def test_overhead_split_by_allocation_in_whole_cents():
    overhead = [ln for ln in _priced().lines if ln.component == "overhead"]
    assert sum(ln.amount for ln in overhead) == Decimal("100.00")
    # a: 20 + 3 = 23 GPU-hours, b: 3
    assert {ln.tenant_id: ln.amount for ln in overhead} == {"a": Decimal("88.46"), "b": Decimal("11.54")}
    assert Fraction(23, 26) * 100 - Fraction("88.46") < Fraction(1, 100)


def test_the_order_of_the_rows_does_not_change_the_lines_or_their_order():
    assert _priced(reverse_rows=True).lines == _priced().lines
    assert rounded(_priced(reverse_rows=True).lines) == rounded(_priced().lines)


def test_unused_guaranteed_hours_and_their_list_value():
    """a's quota entitles it to 1 GPU all October (744 h); it held at least 1 GPU for 10 h, so
    10 h were used and 734 h were not: 734 x 2.50 = 1835.00 at the list (guaranteed) rate.
    b has no quota, so no entitlement."""
    priced = _priced()
    assert set(priced.entitlement) == {("a", "H100")}
    entitled, used, value = priced.entitlement[("a", "H100")]
    assert (entitled, used, value) == (744.0, 10.0, Decimal("1835.00"))


def test_entitlement_follows_the_quotas_in_force():
    """A quota of 2 GPUs from the 11th replaces the 1 GPU one: 10 days x 24 h x 1 + 21 days x
    24 h x 2 = 240 + 1008 = 1248 entitled GPU-hours; one ending on the 21st stops there."""
    from gpuledger.domain.quota import entitled_gpu_hours

    quotas = parse_quotas([
        {"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, "valid_from": "2026-10-01T00:00:00Z"},
        {"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 2, "valid_from": "2026-10-11T00:00:00Z"},
        {"tenant_id": "b", "gpu_class": "H100", "guaranteed_gpus": 4, "valid_from": "2026-09-01T00:00:00Z",
         "valid_to": "2026-10-21T00:00:00Z"}])
    assert entitled_gpu_hours(quotas, OCT, NOV) == {("a", "H100"): 1248.0, ("b", "H100"): 4 * 20 * 24.0}
    assert entitled_gpu_hours(quotas, OCT + 5 * H, OCT + 7 * H) == {("a", "H100"): 2.0, ("b", "H100"): 8.0}


def _committed_card(value):
    return parse_ratecards([{"version": "v1c", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                             "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"}},
                             "committed_quota": value}])[0]


def _price_with(card):
    held = [("a", "H100", "H100", OCT, OCT + 10 * H, 2.0), ("b", "H100", "H100", OCT, OCT + 4 * H, 1.0)]
    cap = WindowCapacity(OCT, NOV, {"H100": 4 * (NOV - OCT)}, {("H100", "unallocated"): 4 * 744 - 24.0})
    return price([(card, cap)], held, QUOTAS, [], [], [], [], (OCT, NOV))


def test_a_committed_quota_charges_the_unused_guaranteed_hours_and_credits_central():
    """a's quota is 1 GPU for October (744 h); it used 10 guaranteed hours: 734 h x 2.50 =
    1,835.00 is charged to a as committed, central is credited as much; both identities hold."""
    plain, committed = _price_with(_committed_card(False)), _price_with(_committed_card(["H100"]))
    assert not [ln for ln in plain.lines if ln.component in ("committed", "commitment_recovery")]
    lines = [(ln.payer, ln.tenant_id, ln.component, ln.quantity, ln.amount) for ln in committed.lines
             if ln.component in ("committed", "commitment_recovery")]
    assert lines == [("tenant", "a", "committed", Decimal(734), Decimal("1835.00")),
                     ("central", "a", "commitment_recovery", Decimal(734), Decimal("-1835.00"))]
    before, after = money_reconciliation(plain), money_reconciliation(committed)
    assert after["difference"] == 0 and after["recoverable_cost"] == before["recoverable_cost"]
    assert after["tenant_charges"] - before["tenant_charges"] == Decimal("1835.00")
    assert before["central_charges"] - after["central_charges"] == Decimal("1835.00")
    assert committed.micro_gpu_hours == plain.micro_gpu_hours  # hours do not move, only who pays for them
    assert committed.commitments == {("a", "H100", "v1c"): [744_000_000, 10_000_000]}
    # b has no quota: nothing committed; a class not listed is not committed
    assert _price_with(_committed_card(["A100"])).commitments == {}


def test_committed_quota_must_be_a_flag_or_classes():
    import pytest
    from gpuledger.domain.cost import RatecardError
    assert _committed_card(True).commits("anything")
    for bad in ("yes", [], [""], 1):
        with pytest.raises(RatecardError, match="committed_quota"):
            _committed_card(bad)


def test_a_profile_with_rates_of_its_own_is_charged_at_them_and_central_funds_the_difference():
    card = parse_ratecards([{"version": "v1p", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                             "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"},
                                          "H100/3g.40gb": {"guaranteed": "2.00", "borrowed": "1.25"}}}])[0]
    held = [("a", "H100", "H100/3g.40gb", OCT, OCT + 10 * H, 0.5)]  # 5 GPU-h: 1 GPU quota covers all of it
    held += [("b", "H100", "H100/3g.40gb", OCT, OCT + 4 * H, 0.5)]  # b has no quota: 2 borrowed GPU-h
    cap = WindowCapacity(OCT, NOV, {"H100": NOV - OCT}, {("H100", "unallocated"): 744 - 7.0})
    priced = price([(card, cap)], held, QUOTAS, [], [], [], [], (OCT, NOV))
    lines = {(ln.payer, ln.tenant_id, ln.component): (ln.quantity, ln.rate, ln.amount) for ln in priced.lines
             if ln.sku_id == "H100/3g.40gb"}
    assert lines == {("tenant", "a", "guaranteed"): (Decimal(5), Decimal("2.00"), Decimal("10.00")),
                     ("central", "a", "subsidy"): (Decimal(5), Decimal("0.50"), Decimal("2.50")),
                     ("tenant", "b", "borrowed"): (Decimal(2), Decimal("1.25"), Decimal("2.50")),
                     ("central", "b", "subsidy"): (Decimal(2), Decimal("1.25"), Decimal("2.50"))}
    money = money_reconciliation(priced)
    assert money["difference"] == 0 and money["recoverable_cost"] == Decimal("1860.00")  # 744 GPU-h x 2.50


def test_a_profile_rate_it_does_not_name_is_its_class_rate():
    card = parse_ratecards([{"version": "v1q", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                             "gpu_hour": {"H100": {"guaranteed": "2.50", "borrowed": "1.75"},
                                          "H100/3g.40gb": {"guaranteed": "2.00"}}}])[0]
    held = [("b", "H100", "H100/3g.40gb", OCT, OCT + 4 * H, 0.5)]  # no quota: 2 borrowed GPU-h at the class's 1.75
    cap = WindowCapacity(OCT, NOV, {"H100": NOV - OCT}, {("H100", "unallocated"): 744 - 2.0})
    (line,) = [ln for ln in price([(card, cap)], held, QUOTAS, [], [], [], [], (OCT, NOV)).lines
               if ln.payer == "tenant"]
    assert (line.component, line.rate, line.amount) == ("borrowed", Decimal("1.75"), Decimal("3.50"))


def test_a_vgpu_profile_with_rates_of_its_own_is_charged_at_them_and_central_funds_the_difference():
    """A vGPU profile's SKU is ``class/profile`` as for MIG (sinks/showback_sql.py). 2 A100-40GB
    for October (1,488 GPU-h, list 3.00). a (quota 1) runs an A100-20C VM (half a GPU) for 10 h:
    5 guaranteed GPU-h at the profile's 2.40, central funds 0.60 each; b (no quota) runs one for
    6 h, 3 borrowed GPU-h at the profile's 1.20 (central funds 1.80 each), and a whole GPU for
    2 h at the class's borrowed 1.50 (central funds 1.50 each)."""
    card = parse_ratecards([{"version": "v1v", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                             "gpu_hour": {"A100-40GB": {"guaranteed": "3.00", "borrowed": "1.50"},
                                          "A100-40GB/A100-20C": {"guaranteed": "2.40", "borrowed": "1.20"}}}])[0]
    quotas = parse_quotas([{"tenant_id": "a", "gpu_class": "A100-40GB", "guaranteed_gpus": 1,
                            "valid_from": "2026-10-01T00:00:00Z"}])
    held = [("a", "A100-40GB", "A100-40GB/A100-20C", OCT, OCT + 10 * H, 0.5),
            ("b", "A100-40GB", "A100-40GB/A100-20C", OCT, OCT + 6 * H, 0.5),
            ("b", "A100-40GB", "A100-40GB", OCT + 6 * H, OCT + 8 * H, 1.0)]
    cap = WindowCapacity(OCT, NOV, {"A100-40GB": 2 * (NOV - OCT)}, {("A100-40GB", "unallocated"): 1488 - 10.0})
    priced = price([(card, cap)], held, quotas, [], [], [], [], (OCT, NOV))
    lines = {(ln.payer, ln.tenant_id, ln.component, ln.sku_id): (ln.quantity, ln.rate, ln.amount)
             for ln in priced.lines}
    assert lines == {
        ("tenant", "a", "guaranteed", "A100-40GB/A100-20C"): (Decimal(5), Decimal("2.40"), Decimal("12.00")),
        ("central", "a", "subsidy", "A100-40GB/A100-20C"): (Decimal(5), Decimal("0.60"), Decimal("3.00")),
        ("tenant", "b", "borrowed", "A100-40GB/A100-20C"): (Decimal(3), Decimal("1.20"), Decimal("3.60")),
        ("central", "b", "subsidy", "A100-40GB/A100-20C"): (Decimal(3), Decimal("1.80"), Decimal("5.40")),
        ("tenant", "b", "borrowed", "A100-40GB"): (Decimal(2), Decimal("1.50"), Decimal("3.00")),
        ("central", "b", "subsidy", "A100-40GB"): (Decimal(2), Decimal("1.50"), Decimal("3.00")),
        ("central", "", "unallocated", "A100-40GB"): (Decimal(1478), Decimal("3.00"), Decimal("4434.00"))}
    # what the tenants pay and central funds is the list value of the hours they held
    assert sum(ln.amount for ln in priced.lines if ln.component != "unallocated") == 10 * Decimal("3.00")
    micro = priced.micro_gpu_hours
    assert micro["physical"] == 1488 * 1_000_000 == micro["tenant"] + micro["unallocated"] and micro["unreconciled"] == 0
    money = money_reconciliation(priced)
    assert money["difference"] == 0 and money["recoverable_cost"] == Decimal("4464.00")  # 1,488 GPU-h x 3.00
    assert (money["tenant_charges"], money["subsidies"]) == (Decimal("18.60"), Decimal("11.40"))


def test_unattributed_capacity_is_suspense_by_holder_and_capacity_nobody_held_stays_central():
    """2 H100s for October (1,488 h at 2.50): a holds 1 GPU 10 h (guaranteed, high); nobody's
    tenant is known for namespace ml-x's 6 h of whole GPUs and ml-y's 7 h of a 3g.40gb instance
    (3/7: 3 GPU-hours): 9 unattributed hours; 4 h unavailable, 1,465 h unallocated. By default
    the 9 h are suspense per holder and SKU (6 x 2.50 = 15.00, 3 x 2.50 = 7.50), not central;
    charged to central instead (a policy choice, and what a policy of None does), they are one
    central line of 22.50. The holders' hours carry float noise (6.0000000001): they are split
    in proportion inside the bucket, so the partition is the same whoever pays."""
    from gpuledger.domain.pricing import UNATTRIBUTED_TO_CENTRAL
    from gpuledger.domain.suspense import BILL_CONFIDENCE, billing_classes

    window = NOV - OCT
    cap = WindowCapacity(OCT, NOV, {"H100": 2 * window},
                         {("H100", "unattributed"): 9.0, ("H100", "unavailable"): 4.0, ("H100", "unallocated"): 1465.0},
                         unattributed=(("H100", "H100", "namespace/ml-x", 6.0000000001),
                                       ("H100", "H100/3g.40gb", "namespace/ml-y", 3.0)))
    held = [("a", "H100", "H100", OCT, OCT + 10 * H, 1.0, "high")]
    central_policy = billing_classes(["high", "medium"], "bill", "central")
    assert UNATTRIBUTED_TO_CENTRAL in central_policy and UNATTRIBUTED_TO_CENTRAL not in BILL_CONFIDENCE
    got = {}
    for name, bill in (("suspense", BILL_CONFIDENCE), ("central", central_policy), ("none", None)):
        priced = price([(CARD, cap)], held, QUOTAS, [], [], [], [], (OCT, NOV), bill)
        micro = priced.micro_gpu_hours
        assert micro["physical"] == 1488_000_000 == micro["tenant"] + micro["suspense"] + micro["unattributed"] \
            + micro["unallocated"] + micro["fragmentation"] + micro["unavailable"] + micro["unreconciled"]
        assert (micro["unattributed"], micro["unreconciled"]) == (9_000_000, 0)
        money = money_reconciliation(priced)
        assert money["difference"] == 0 and money["recoverable_cost"] == Decimal("3820.00")  # 1,488 x 2.50 + 100
        assert money["recoverable_cost"] == money["tenant_charges"] + money["central_charges"] + money["subsidies"] \
            + money["suspense"] - money["credits"]
        got[name] = (priced, micro, money)
    priced, micro, money = got["suspense"]
    assert micro["unattributed_suspense"] == 9_000_000 and micro["suspense"] == 0
    review = [(ln.payer, ln.tenant_id, ln.holder, ln.sku_id, ln.quantity, ln.amount)
              for ln in priced.lines if ln.payer == "suspense"]
    assert review == [("suspense", "", "namespace/ml-x", "H100", Decimal(6), Decimal("15.00")),
                      ("suspense", "", "namespace/ml-y", "H100/3g.40gb", Decimal(3), Decimal("7.50"))]
    assert not [ln for ln in priced.lines if ln.component == "unattributed"]
    central = {ln.component: ln.amount for ln in priced.lines if ln.payer == "central"}
    assert central == {"unallocated": Decimal("3662.50"), "unavailable": Decimal("10.00")}  # nobody held them
    assert (money["suspense"], money["central_charges"], money["tenant_charges"]) == (
        Decimal("22.50"), Decimal("3672.50"), Decimal("125.00"))  # a: 10 x 2.50 + all the overhead
    for name in ("central", "none"):
        priced, micro, money = got[name]
        assert micro["unattributed_suspense"] == 0 and money["suspense"] == 0
        (line,) = [ln for ln in priced.lines if ln.component == "unattributed"]
        assert (line.payer, line.quantity, line.amount, line.holder) == ("central", Decimal(9), Decimal("22.50"), "")
        assert money["central_charges"] == Decimal("3695.00")
