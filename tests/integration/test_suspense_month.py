"""Acceptance (suspense): a month with time-sliced (modeled) hours and unattributed capacity,
through the real broker, workers, sink and ClickHouse engine.

The month plan (tests/plans.py) plus one time-sliced H100 (node-t, 4 replicas) where beta's
pod ``share-0`` holds replica ::0 from 100 h to 200 h: 100 h x 1/4 = 25 modeled GPU-hours,
25 x 2.50 (the list rate) = 62.50; and a namespace ``lab-ns`` without a tenant label whose pod
holds node-b's free GPU 2 for 20 h in October and 20 h in November: 20 unattributed GPU-hours
a month, 20 x 2.50 = 50.00. Under the default policy (bill high and medium; unattributed
capacity in suspense) both are suspense: in October's closed document, paid by no one, beta's
shown to beta as under review, lab-ns's held by its namespace, with both reconciliation
identities exact. After the close, ``suspense assign`` gives beta's hours to beta and
lab-ns's October hours to central: correction lines in November's close. November is still
open when lab-ns's November hours are assigned to alpha, released back to review and then
assigned to gamma: November's close books them as gamma's own line. The identities hold in
both months. ``load suspense`` refuses a list that drops or changes a recorded decision.

November is priced by a card with ``committed_quota``: gamma (quota 1) holds nothing in
November, so its 720 unused guaranteed hours are charged at 2.50 = 1,800.00 (central is
credited as much); alpha (quota 2, holds 3 GPUs) uses all of its quota, so nothing is
unused. The FOCUS export maps both to the commitment-discount columns.
"""

from __future__ import annotations

import csv
import uuid
from dataclasses import replace
from decimal import Decimal

import orjson
import pytest

from conftest import Stack
from focus_check import COMMITMENT_CRITERIA, UNDECIDABLE, UNDECIDABLE_WITH_COMMITMENTS, validate_focus
from gpuledger.demo.builder import det_uuid
from gpuledger.demo.cluster import MigLayout, NamespacePlan, PodPlan, SharedGpu, write_capture
from plans import NOV_1, GpuSpec, H, T0, gpu_uuid, month_plan

pytestmark = pytest.mark.integration

ENV = {"GPULEDGER_PODRESOURCES_GRACE_S": "7200", "GPULEDGER_STALE_CEILING_S": "7200"}
SUSPENSE_HOURS = Decimal("25.000000")
SUSPENSE_AMOUNT = Decimal("62.50")
LAB = "namespace/lab-ns"
LAB_HOURS, LAB_AMOUNT = Decimal("20.000000"), Decimal("50.00")  # each month
CLUSTER = ("--cluster", "prod-ai-1")


def timeslice_month():
    plan = month_plan()
    gpu = GpuSpec(gpu_uuid("month", "node-t", 0), "node-t", 0)
    pod = PodPlan("beta-ns", "share-0", det_uuid("pod", "month", "share"), "node-t", (), T0 + 100 * H,
                  T0 + 200 * H, 0.5, (f"{gpu.uuid}::0",))
    lab = NamespacePlan("lab-ns", det_uuid("ns", "month", "lab"), T0 - 24 * H, ((T0 - 24 * H, None),))
    probes = [PodPlan("lab-ns", f"probe-{i}", det_uuid("pod", "month", "lab", i), "node-b", (2,), start + 10 * H,
                      start + 30 * H, 0.3) for i, start in enumerate((T0, NOV_1))]
    return replace(plan, nodes={**plan.nodes, "node-t": [gpu]}, namespaces=[*plan.namespaces, lab],
                   pods=[*plan.pods, pod, *probes],
                   shared=[*plan.shared, SharedGpu(gpu, "timeslice", replicas=4, layouts=(MigLayout(T0, ()),))])


def close(stack: Stack, period: str) -> dict:
    stack.run("close", "--period", period, "--by", "pat")
    return orjson.loads(stack.run("close", "--period", period, "--approve", "--by", "quinn").stdout)


def identities(doc: dict) -> None:
    r = {k: Decimal(v) for k, v in doc["reconciliation"].items()}
    assert r["difference_money"] == 0
    assert r["recoverable_cost"] == (r["tenant_charges"] + r["central_charges"] + r["subsidies"] + r["suspense"]
                                     - r["credits"])
    assert r["physical_gpu_hours"] == (r["allocated_gpu_hours"] + r["unallocated_gpu_hours"]
                                       + r["unavailable_gpu_hours"] + r["difference_gpu_hours"])
    lines = {"tenant": Decimal(0), "central": Decimal(0), "suspense": Decimal(0)}
    for ln in doc["lines"]:  # the period's own lines (corrections to earlier ones are reconciled there)
        if ln["component"] not in ("credit", "subsidy") and ln["charge_class"] == "Regular":
            lines[ln["payer"]] += Decimal(ln["amount"])
    assert lines["suspense"] == r["suspense"]


@pytest.fixture(scope="module")
def month(broker, tmp_path_factory):
    root = tmp_path_factory.mktemp("suspense")
    capture = write_capture(timeslice_month(), root / "capture")
    stack = Stack(root / "home", f"t{uuid.uuid4().hex[:10]}", ENV)
    stack.run("ingest", str(capture))
    stack.run("process", "--until-caught-up")
    return stack, close(stack, "2026-10")


def _review(doc: dict) -> dict:
    """The document's own suspense lines: (tenant, holder) -> (SKU, GPU-hours, amount)."""
    return {(ln["tenant_id"], ln.get("holder")): (ln["sku_id"], Decimal(ln["quantity"]), Decimal(ln["amount"]))
            for ln in doc["lines"] if ln["payer"] == "suspense" and ln["charge_class"] == "Regular"}


def test_modeled_and_unattributed_hours_are_suspense_in_the_closed_month(month):
    _, october = month
    identities(october)
    assert october["billing_policy"] == {"bill_confidence": ["high", "medium"], "telemetry_unknown": "bill",
                                         "unattributed": "suspense"}
    assert _review(october) == {("beta", None): ("H100-80GB", SUSPENSE_HOURS, SUSPENSE_AMOUNT),
                                (None, LAB): ("H100-80GB", LAB_HOURS, LAB_AMOUNT)}
    r = october["reconciliation"]
    assert Decimal(r["suspense_gpu_hours"]) == SUSPENSE_HOURS + LAB_HOURS
    assert Decimal(r["unattributed_gpu_hours"]) == LAB_HOURS  # still measured (and bounded by the close policy)
    assert Decimal(r["suspense"]) == SUSPENSE_AMOUNT + LAB_AMOUNT
    assert not [ln for ln in october["lines"] if ln["component"] == "unattributed"], "no longer central's"
    beta = next(t for t in october["tenants"] if t["tenant_id"] == "beta")
    assert Decimal(beta["under_review"]) == SUSPENSE_AMOUNT
    statement = month[0].run("statement", "--period", "2026-10", "--tenant", "beta").stdout
    under = statement[statement.index("Under review"):statement.index("Total for")]
    assert "62.50" in under and "25.000000 GPU-hours" in under and "lab-ns" not in statement
    # beta pays only its exclusive hours: as in the month without the shared GPU
    assert not any(ln["tenant_id"] == "beta" and ln["payer"] == "tenant" and ln["sku_id"] == "H100-80GB"
                   and Decimal(ln["quantity"]) != 300 for ln in october["lines"] if ln["component"] == "borrowed")


def publish_committed_november_card(stack: Stack, tmp_path) -> None:
    cards = timeslice_month().ratecards
    november = {**cards[0], "version": "2026-11-committed", "valid_from": "2026-11-01T00:00:00Z",
                "committed_quota": ["H100-80GB"]}
    path = tmp_path / "ratecards.json"
    path.write_bytes(orjson.dumps([*cards, november]))
    stack.run("load", "ratecards", str(path), "--cluster", month_plan().cluster_id)


def listed(stack: Stack, period: str) -> dict:
    return orjson.loads(stack.run("suspense", "list", "--period", period, "--format", "json").stdout)


def decide(stack: Stack, action: str, period: str, whose: tuple[str, str], *rest: str, check: bool = True):
    return stack.run("suspense", action, *CLUSTER, "--period", period, *whose, *rest, "--by", "fin", check=check)


def test_suspense_list_then_assign_books_corrections_in_the_next_close(month, tmp_path):
    stack, october = month
    publish_committed_november_card(stack, tmp_path)
    items = listed(stack, "2026-10")["items"]
    assert listed(stack, "2026-10")["closed"]
    assert [(i["tenant_id"], i["holder"], i["gpu_hours"], i["status"]) for i in items] == [
        (None, LAB, "20.000000", "under review"), ("beta", None, "25.000000", "under review")]
    assert items[0]["reasons"] == [{"reason": "namespace lab-ns has no gpuledger.io/tenant label",
                                    "gpu_hours": "20.000000"}]
    refused = decide(stack, "assign", "2026-10", ("--tenant", "beta"), "--to", "beta", "--reason", " ", check=False)
    assert refused.returncode == 2 and "reason" in refused.stderr
    decide(stack, "assign", "2026-10", ("--tenant", "beta"), "--to", "beta", "--reason",
           "share-0 confirmed by beta's lead")
    decide(stack, "assign", "2026-10", ("--holder", LAB), "--to", "central", "--reason", "platform probes")
    # November is open: its lab-ns hours go to alpha, back under review, then to gamma
    decide(stack, "assign", "2026-11", ("--holder", LAB), "--to", "alpha", "--reason", "alpha's probes?")
    stack.run("process", "--until-caught-up")
    assert [(i["holder"], i["status"]) for i in listed(stack, "2026-11")["items"]] == [(LAB, "assigned to alpha")]
    decide(stack, "release", "2026-11", ("--holder", LAB), "--reason", "alpha ran no probes")
    stack.run("process", "--until-caught-up")
    (item,) = listed(stack, "2026-11")["items"]
    assert (item["holder"], item["gpu_hours"], item["status"], item["decision"]) == (LAB, "20.000000", "under review",
                                                                                    None)
    decide(stack, "assign", "2026-11", ("--holder", LAB), "--to", "gamma", "--reason", "gamma's probe job")
    stack.run("process", "--until-caught-up")
    items = listed(stack, "2026-10")["items"]
    assert [(i["tenant_id"], i["holder"], i["status"], i["decision"]["by"]) for i in items] == [
        (None, LAB, "assigned to central", "fin"), ("beta", None, "assigned to beta", "fin")]
    november_open = listed(stack, "2026-11")
    assert [i["status"] for i in november_open["items"]] == ["assigned to gamma"]
    assert [d["to"] for d in november_open["decisions"]] == ["alpha", "suspense", "gamma"]
    showback = orjson.loads(stack.run("showback", "--period", "2026-11", "--format", "json").stdout)
    gamma = next(t for t in showback["tenants"] if t["tenant_id"] == "gamma")
    assert gamma["cost"]["suspense_assigned"] == float(LAB_AMOUNT)  # booked in the open period
    november = close(stack, "2026-11")
    identities(november)
    assert _review(november) == {}
    booked = [(ln["payer"], ln["tenant_id"], ln.get("holder"), ln["component"], Decimal(ln["quantity"]),
               Decimal(ln["amount"])) for ln in november["lines"]
              if ln["charge_class"] == "Regular" and ln["component"] == "suspense_assigned"]
    assert booked == [("tenant", "gamma", LAB, "suspense_assigned", LAB_HOURS, LAB_AMOUNT)]
    assert Decimal(november["reconciliation"]["unattributed_gpu_hours"]) == LAB_HOURS
    assert Decimal(november["reconciliation"]["suspense"]) == 0
    fixes = [(ln["payer"], ln["tenant_id"] or "", ln.get("holder", ""), ln["component"], Decimal(ln["amount"]))
             for ln in november["lines"] if ln["corrects_period"] == "2026-10"]
    assert sorted(fixes) == sorted([("suspense", "beta", "", "suspense", -SUSPENSE_AMOUNT),
                                    ("tenant", "beta", "", "suspense_assigned", SUSPENSE_AMOUNT),
                                    ("suspense", "", LAB, "suspense", -LAB_AMOUNT),
                                    ("central", "", LAB, "suspense_assigned", LAB_AMOUNT)])
    beta = next(t for t in november["tenants"] if t["tenant_id"] == "beta")
    assert Decimal(beta["corrections"]) == SUSPENSE_AMOUNT
    committed = [(ln["payer"], ln["tenant_id"], ln["component"], Decimal(ln["quantity"]), Decimal(ln["amount"]))
                 for ln in november["lines"] if ln["component"] in ("committed", "commitment_recovery")]
    assert sorted(committed) == [("central", "gamma", "commitment_recovery", Decimal(720), Decimal("-1800.00")),
                                 ("tenant", "gamma", "committed", Decimal(720), Decimal("1800.00"))]
    assert [(c["tenant_id"], c["entitled_gpu_hours"], c["used_gpu_hours"], c["unused_gpu_hours"])
            for c in november["commitments"]] == [("alpha", "1440.000000", "1440.000000", "0.000000"),
                                                  ("gamma", "720.000000", "0.000000", "720.000000")]
    assert "commitments" not in october
    # the closed October is unchanged
    assert orjson.loads(stack.run("ledger", "show", "--period", "2026-10").stdout)["hash"] == october["hash"]


def test_loading_a_decision_list_that_drops_or_changes_a_recorded_decision_is_refused(month, tmp_path):
    stack, _ = month
    decide(stack, "assign", "2026-12", ("--holder", LAB), "--to", "central", "--reason", "no December probes")
    decide(stack, "release", "2026-12", ("--holder", LAB), "--reason", "there may be")
    recorded = orjson.loads(max((stack.home / "suspense").glob("*.json"), key=lambda p: p.stat().st_mtime).read_bytes())
    first, last = recorded[0]["assignment_id"], recorded[-1]["assignment_id"]

    def load(doc: list):
        path = tmp_path / f"suspense-{uuid.uuid4().hex[:6]}.json"
        path.write_bytes(orjson.dumps(doc))
        return stack.run("load", "suspense", str(path), *CLUSTER, check=False)

    dropped = load(recorded[1:])
    assert dropped.returncode == 2, dropped.stderr
    assert "nothing published" in dropped.stderr and first in dropped.stderr and "suspense assign" in dropped.stderr
    changed = load([*recorded[:-1], {**recorded[-1], "to": "alpha"}])
    assert changed.returncode == 2 and last in changed.stderr and first not in changed.stderr, changed.stderr
    extra = {**recorded[-1], "assignment_id": f"{last}-release", "to": "suspense", "reason": "reopened"}
    appended = load([*recorded, extra])
    assert appended.returncode == 0, appended.stderr
    # the record now holds the appended list: dropping the new decision is refused too
    again = load(recorded)
    assert again.returncode == 2 and f"{last}-release" in again.stderr, again.stderr


def test_focus_exports_with_suspense_and_corrections_pass_the_validator(month, tmp_path):
    """October has a suspense line; November books its settlement as corrections."""
    stack, _ = month
    if orjson.loads(stack.run("ledger", "show", "--period", "2026-11", check=False).stdout or "null") is None:
        test_suspense_list_then_assign_books_corrections_in_the_next_close(month, tmp_path)
    for period in ("2026-10", "2026-11"):
        export = tmp_path / f"focus-{period}.csv"
        stack.run("export", "focus", "--period", period, "--out", str(export))
        rows = list(csv.DictReader(export.open()))
        kinds = {(r["BillingAccountId"], orjson.loads(r["Tags"])["gpuledger/component"], r["ChargeClass"])
                 for r in rows}
        if period == "2026-10":
            assert any(a.endswith("-suspense") and c == "suspense" for a, c, _ in kinds), kinds
        else:
            assert ("beta", "suspense_assigned", "Correction") in kinds, kinds
            lab = [(r["BillingAccountId"], r["ChargeClass"]) for r in rows
                   if orjson.loads(r["Tags"]).get("gpuledger/holder") == LAB]
            assert sorted(lab) == sorted([("gamma", ""), ("platform-central", "Correction"),
                                          ("platform-central-suspense", "Correction")]), lab
            commitment = {(r["BillingAccountId"], r["CommitmentDiscountStatus"], r["PricingCategory"],
                           r["CommitmentDiscountQuantity"]) for r in rows if r["CommitmentDiscountId"]}
            assert commitment == {("gamma", "Unused", "Committed", "720.000000"),
                                  ("alpha", "Used", "Committed", "1440.000000")}, commitment
        failed, passed = validate_focus(export, tmp_path)
        assert failed == UNDECIDABLE, (period, sorted(failed))
        assert len(passed) >= 130, len(passed)
        # declared as a provider with commitment discounts, the commitment columns are checked too
        failed, passed = validate_focus(export, tmp_path, COMMITMENT_CRITERIA)
        assert failed == UNDECIDABLE_WITH_COMMITMENTS, (period, sorted(failed))
        assert {"PricingCategory-C-004-C", "PricingCategory-C-007-M", "CommitmentDiscountStatus-C-003-C",
                "CommitmentDiscountCategory-C-004-C", "CommitmentDiscountQuantity-C-005-C",
                "CommitmentDiscountUnit-C-006-C"} <= passed, sorted(p for p in passed if "Commit" in p or "Pricing" in p)
        # CommitmentDiscountStatus-C-004-C as the specification writes it
        assert all(r["CommitmentDiscountStatus"] for r in rows
                   if r["CommitmentDiscountId"] and r["ChargeCategory"] == "Usage")
