"""Acceptance (retired capacity): a cluster that exists for 6 hours of a month, with an
overhead on its rate card, closes. Physical hours are the inventory's, allocation is exact,
the month's overhead is distributed in full to the cent, and closing again prints the same
hash. Evidence on a GPU after it left the inventory is its own reason, naming the GPU."""

from decimal import Decimal

import orjson
import pytest

from captures import append_lines
from gpuledger.demo.builder import CaptureWriter, podresources_response
from gpuledger.demo.varied import H, VariedTruth, varied_plan, write_varied
from gpuledger.domain.timeutil import format_rfc3339

pytestmark = pytest.mark.integration

START_MS = 1_791_021_600_000  # 2026-10-03T10:00:00Z: the cluster runs 10:00-16:00 on 3 October
CARD = {"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": None, "currency": "USD",
        "gpu_hour": {"H100-80GB": {"guaranteed": "2.00", "borrowed": "3.00"}},
        "overhead": {"amount": "100.00", "rule": "proportional_to_allocation"}}


def _plan():
    plan = varied_plan(30, 30, hours=6, retire_after_h=6, start_ms=START_MS, seed=11)
    plan.ratecards = [CARD]
    return plan


def test_a_cluster_retired_mid_month_closes_with_its_overhead_in_full(stack, tmp_path):
    plan = _plan()
    truth = VariedTruth.of(plan)
    stack.run("ingest", str(write_varied(plan, tmp_path / "capture")))
    stack.run("process", "--until-caught-up")
    prepared = stack.run("close", "--period", "2026-10", "--by", "pat", check=False)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    stack.run("close", "--period", "2026-10", "--approve", "--by", "quinn")
    doc = orjson.loads(stack.run("ledger", "show", "--period", "2026-10").stdout)
    assert doc["evidence_to"] == "2026-11-01T00:00:00Z"
    gpus = sum(len(g) for g in plan.nodes.values())
    assert Decimal(doc["reconciliation"]["physical_gpu_hours"]) == Decimal(gpus * 6)
    for t in doc["tenants"]:
        assert float(t["allocated_gpu_hours"]) == pytest.approx(truth.allocated_h[t["tenant_id"]], abs=1e-6)
    assert sorted(t["tenant_id"] for t in doc["tenants"]) == plan.tenants
    overhead = [ln for ln in doc["lines"] if ln["component"] == "overhead"]
    assert len(overhead) == len(plan.tenants)
    assert sum(Decimal(ln["amount"]) for ln in overhead) == Decimal("100.00")
    again = stack.run("close", "--period", "2026-10")
    assert doc["hash"] in again.stdout


def test_evidence_outside_the_inventory_is_named_and_blocks_close(stack, tmp_path):
    plan = _plan()
    capture = write_varied(plan, tmp_path / "capture")
    gpu = plan.nodes["node-0"][0]
    late = plan.retire_ms + 10 * 60_000  # a kubelet still hands out a GPU the inventory retired
    for t in (late, late + 30_000, late + 60_000):
        append_lines(capture, "podresources.jsonl", [orjson.dumps({
            "observed_at": format_rfc3339(t), "node": "node-0",
            "response": podresources_response({("acme-ns", "stray-0"): [gpu.uuid]})}).decode()])
    w = CaptureWriter(capture, plan.cluster_id)  # the API server still answers: its bookmarks go on
    for i, t in enumerate(range(plan.retire_ms + 60_000, late + 5 * 60_000, 60_000)):
        w.bookmark(t, 10_000_000 + i)
    w.close()
    stack.run("ingest", str(capture))
    stack.run("process", "--until-caught-up")
    refused = stack.run("close", "--period", "2026-10", check=False)
    assert refused.returncode == 2
    reasons = [line for line in refused.stdout.splitlines() if line.startswith("refused: ")]
    outside = [r for r in reasons if "outside the approved inventory" in r]
    assert outside and gpu.uuid in outside[0] and "publish inventory.json" in outside[0], reasons
    assert "1.000000 GPU-hours" not in outside[0] and "0.016667 GPU-hours" in outside[0], outside
    assert not [r for r in reasons if "add the class to the rate card" in r], reasons
    showback = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    assert showback["platform"]["outside_inventory"] == [
        {"gpu_uuid": gpu.uuid, "node": "node-0", "gpu_hours": pytest.approx(60_000 / H)}]
