"""Acceptance (ledger): close refuses, exit 2 with a readable reason, a capture with too much
capacity allocated without a tenant identity, and writes nothing."""

import orjson
import pytest

from gpuledger.demo.cluster import NamespacePlan, write_capture
from gpuledger.demo.builder import det_uuid
from plans import H, T0, truth_plan

pytestmark = pytest.mark.integration


def test_close_refuses_too_much_unattributed_capacity(stack, tmp_path):
    plan = truth_plan()
    # the namespace of beta's and gamma's shared notebook never had a tenant label
    plan.namespaces[1] = NamespacePlan("shared", det_uuid("ns", "shared"), T0 - 24 * H, ((T0 - 24 * H, None),))
    plan.ratecards = [{"version": "v1", "valid_from": "2026-10-01T00:00:00Z", "currency": "USD",
                       "gpu_hour": {"H100-80GB": {"guaranteed": "2.50", "borrowed": "2.50"}}}]
    stack.run("ingest", str(write_capture(plan, tmp_path / "capture")))
    stack.run("process", "--until-caught-up")
    refused = stack.run("close", "--period", "2026-10", check=False)
    assert refused.returncode == 2
    reasons = [line for line in refused.stdout.splitlines() if line.startswith("refused: ")]
    # notebook-0 held one GPU 30..150 min: 2 of 8 x 3 = 24 physical GPU-hours (8.33 %)
    assert any("2.000000 GPU-hours (8.33%) allocated with no tenant identity; the policy allows 2.00%" in r
               and "gpuledger.io/tenant" in r for r in reasons), reasons
    assert any("evidence reaches only 2026-10-01T03:00:00Z" in r for r in reasons), reasons
    assert "refused" in refused.stderr
    shown = stack.run("ledger", "show", "--period", "2026-10", check=False)
    assert shown.returncode == 2 and "not closed" in shown.stderr
    assert orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)["provisional"]
