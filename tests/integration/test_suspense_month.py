"""Acceptance (suspense): a month with time-sliced (modeled) hours, through the real broker,
workers, sink and ClickHouse engine.

The month plan (tests/plans.py) plus one time-sliced H100 (node-t, 4 replicas) where beta's
pod ``share-0`` holds replica ::0 from 100 h to 200 h: 100 h x 1/4 = 25 modeled GPU-hours,
25 x 2.50 (the list rate) = 62.50. Under the default policy (bill high and medium) they are
suspense: in October's closed document, paid by no one, shown to beta as under review, with
both reconciliation identities exact. ``suspense assign`` to beta after the close books them
as correction lines in November's close, and the identities still hold there.
"""

from __future__ import annotations

import csv
import uuid
from dataclasses import replace
from decimal import Decimal

import orjson
import pytest

from conftest import Stack
from focus_check import UNDECIDABLE, validate_focus
from gpuledger.demo.builder import det_uuid
from gpuledger.demo.cluster import MigLayout, PodPlan, SharedGpu, write_capture
from plans import GpuSpec, H, T0, gpu_uuid, month_plan

pytestmark = pytest.mark.integration

ENV = {"GPULEDGER_PODRESOURCES_GRACE_S": "7200", "GPULEDGER_STALE_CEILING_S": "7200"}
SUSPENSE_HOURS = Decimal("25.000000")
SUSPENSE_AMOUNT = Decimal("62.50")


def timeslice_month():
    plan = month_plan()
    gpu = GpuSpec(gpu_uuid("month", "node-t", 0), "node-t", 0)
    pod = PodPlan("beta-ns", "share-0", det_uuid("pod", "month", "share"), "node-t", (), T0 + 100 * H,
                  T0 + 200 * H, 0.5, (f"{gpu.uuid}::0",))
    return replace(plan, nodes={**plan.nodes, "node-t": [gpu]}, pods=[*plan.pods, pod],
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


def test_modeled_hours_are_suspense_in_the_closed_month(month):
    _, october = month
    identities(october)
    assert october["billing_policy"] == {"bill_confidence": ["high", "medium"]}
    suspense = [ln for ln in october["lines"] if ln["payer"] == "suspense"]
    assert [(ln["tenant_id"], ln["sku_id"], Decimal(ln["quantity"]), Decimal(ln["amount"])) for ln in suspense] == [
        ("beta", "H100-80GB", SUSPENSE_HOURS, SUSPENSE_AMOUNT)]
    assert Decimal(october["reconciliation"]["suspense_gpu_hours"]) == SUSPENSE_HOURS
    beta = next(t for t in october["tenants"] if t["tenant_id"] == "beta")
    assert Decimal(beta["under_review"]) == SUSPENSE_AMOUNT
    statement = month[0].run("statement", "--period", "2026-10", "--tenant", "beta").stdout
    under = statement[statement.index("Under review"):statement.index("Total for")]
    assert "62.50" in under and "25.000000 GPU-hours" in under
    # beta pays only its exclusive hours: as in the month without the shared GPU
    assert not any(ln["tenant_id"] == "beta" and ln["payer"] == "tenant" and ln["sku_id"] == "H100-80GB"
                   and Decimal(ln["quantity"]) != 300 for ln in october["lines"] if ln["component"] == "borrowed")


def test_suspense_list_then_assign_books_corrections_in_the_next_close(month):
    stack, october = month
    listed = orjson.loads(stack.run("suspense", "list", "--period", "2026-10", "--format", "json").stdout)
    assert listed["closed"] and [(i["tenant_id"], i["gpu_hours"], i["status"]) for i in listed["items"]] == [
        ("beta", "25.000000", "under review")]
    refused = stack.run("suspense", "assign", "--cluster", "prod-ai-1", "--period", "2026-10", "--tenant", "beta",
                        "--to", "beta", "--reason", " ", "--by", "fin", check=False)
    assert refused.returncode == 2 and "reason" in refused.stderr
    stack.run("suspense", "assign", "--cluster", "prod-ai-1", "--period", "2026-10", "--tenant", "beta",
              "--to", "beta", "--reason", "share-0 confirmed by beta's lead", "--by", "fin")
    stack.run("process", "--until-caught-up")
    listed = orjson.loads(stack.run("suspense", "list", "--period", "2026-10", "--format", "json").stdout)
    (item,) = listed["items"]
    assert item["status"] == "assigned to beta" and item["decision"]["by"] == "fin"
    november = close(stack, "2026-11")
    identities(november)
    fixes = [(ln["payer"], ln["tenant_id"], ln["component"], Decimal(ln["amount"])) for ln in november["lines"]
             if ln["corrects_period"] == "2026-10"]
    assert sorted(fixes) == sorted([("suspense", "beta", "suspense", -SUSPENSE_AMOUNT),
                                    ("tenant", "beta", "suspense_assigned", SUSPENSE_AMOUNT)])
    beta = next(t for t in november["tenants"] if t["tenant_id"] == "beta")
    assert Decimal(beta["corrections"]) == SUSPENSE_AMOUNT
    # the closed October is unchanged
    assert orjson.loads(stack.run("ledger", "show", "--period", "2026-10").stdout)["hash"] == october["hash"]


def test_focus_exports_with_suspense_and_corrections_pass_the_validator(month, tmp_path):
    """October has a suspense line; November books its settlement as corrections."""
    stack, _ = month
    if orjson.loads(stack.run("ledger", "show", "--period", "2026-11", check=False).stdout or "null") is None:
        test_suspense_list_then_assign_books_corrections_in_the_next_close(month)
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
        failed, passed = validate_focus(export, tmp_path)
        assert failed == UNDECIDABLE, (period, sorted(failed))
        assert len(passed) >= 130, len(passed)
