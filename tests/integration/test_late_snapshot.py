"""Acceptance: a PodResources snapshot that arrives after the samples it explains still
attributes them — event time, not arrival order.

Grace period: 120 s (the default ``podresources_grace_s``). Here node-b's snapshots stop
at 60:00 while node-a's go on to 61:00, a lag of 60 s, inside the grace; all DCGM samples
(to 180:00) and watch events are already in Kafka. The samples after 60:00 wait. The
snapshots after that arrive in a second ingest, and the result equals an in-order run.
"""

import uuid

import pytest

from conftest import Stack
from captures import split_lines
from gpuledger.demo.cluster import write_capture
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.sinks.schema_sql import UTILIZATION_COLUMNS
from plans import truth_plan

pytestmark = pytest.mark.integration

CUT_A = parse_rfc3339_ms("2026-10-01T01:01:00Z")
CUT_B = parse_rfc3339_ms("2026-10-01T01:00:00Z")


def _late(line: dict) -> bool:
    t = parse_rfc3339_ms(line["observed_at"])
    return (line["node"] == "node-a" and t > CUT_A) or (line["node"] == "node-b" and t > CUT_B)


def test_late_snapshots_still_attribute_the_samples_they_explain(stack, tmp_path):
    plan = truth_plan()
    full = write_capture(plan, tmp_path / "full")
    moved = split_lines(full, tmp_path / "early", tmp_path / "late", "podresources.jsonl", _late)
    assert moved > 100

    stack.run("ingest", str(tmp_path / "early"))
    first = stack.run("process", "--until-caught-up")
    assert "samples waiting" in first.stderr
    b_gpus = {g.uuid for g in plan.nodes["node-b"]}
    util = [dict(zip(UTILIZATION_COLUMNS, r)) for r in stack.facts()["utilization_facts"]]
    waiting_b = [r for r in util if r["gpu_uuid"] in b_gpus and r["observed_at_ms"] >= CUT_B]
    assert waiting_b == []  # not guessed, not dropped: waiting for their snapshot

    stack.run("ingest", str(tmp_path / "late"))
    stack.run("process", "--until-caught-up")
    late_run = stack.facts(with_source=False)

    in_order = Stack(tmp_path / "in-order-home", f"t{uuid.uuid4().hex[:10]}")
    in_order.run("ingest", str(full))
    in_order.run("process", "--until-caught-up")
    # the same facts; only where their evidence sits in Kafka (offsets) differs
    assert late_run == in_order.facts(with_source=False)
    columns = [c for c in UTILIZATION_COLUMNS if not c.startswith("src_")]
    late_rows = [dict(zip(columns, r)) for r in late_run["utilization_facts"]]
    unattributed_b = [r for r in late_rows if r["gpu_uuid"] in b_gpus and r["confidence"] == "unattributed"]
    assert unattributed_b and {r["reason"] for r in unattributed_b} <= {"device unallocated", "maintenance"}
