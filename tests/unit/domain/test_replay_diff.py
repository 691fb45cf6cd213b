"""diff: the replay against the ledger plus the corrections later closes booked for it."""

from decimal import Decimal

from gpuledger.domain.ledger import line_doc
from gpuledger.domain.pricing import Line
from gpuledger.replay.diff import diff_ledgers


def _doc(period, *lines):
    return {"period": period, "lines": [line_doc(ln) for ln in lines]}


def _line(q, tenant="a", corrects=None):
    q, rate = Decimal(q), Decimal("2.50")
    return Line("tenant", tenant, "guaranteed", "H100", "gpu_hour", q, rate, q * rate, q * rate, "v1", 0, 3_600_000,
                "x", "Correction" if corrects else "Regular", corrects)


def test_equal_when_the_corrections_make_up_the_difference():
    closed = [_doc("2026-10", _line("10")), _doc("2026-11", _line("2", corrects="2026-10"), _line("5"))]
    assert diff_ledgers(closed, "2026-10", _doc("2026-10", _line("12"))) == []


def test_lines_that_differ_are_named_with_both_sides():
    closed = [_doc("2026-10", _line("10"), _line("1", tenant="b"))]
    (d,) = diff_ledgers(closed, "2026-10", _doc("2026-10", _line("10"), _line("4", tenant="b")))
    assert (d["tenant_id"], d["ledger_quantity"], d["replay_quantity"], d["difference"]) == (
        "b", "1.000000", "4.000000", "7.50")
    # a line only the ledger has shows with a zero replay side
    (d,) = diff_ledgers(closed, "2026-10", _doc("2026-10", _line("10")))
    assert (d["replay_amount"], d["difference"]) == ("0.00", "-2.50")


def test_unattributed_lines_differ_by_holder():
    """Two holders' under-review hours whose amounts trade places are two differences, not none."""
    def review(q, holder):
        q, rate = Decimal(q), Decimal("2.50")
        return Line("suspense", "", "suspense", "H100", "gpu_hour", q, rate, q * rate, q * rate, "v1", 0, 3_600_000,
                    "x", holder=holder)

    closed = [_doc("2026-10", review("6", "namespace/ml-x"), review("2", "vm/vm-7"))]
    diffs = diff_ledgers(closed, "2026-10", _doc("2026-10", review("2", "namespace/ml-x"), review("6", "vm/vm-7")))
    assert [(d["tenant_id"], d["holder"], d["difference"]) for d in diffs] == [
        (None, "namespace/ml-x", "-10.00"), (None, "vm/vm-7", "10.00")]
