"""Acceptance: SIGKILL of the `process` worker mid-run, then a restart, ends with the same
fact set in ClickHouse as an undisturbed run: nothing lost, nothing twice."""

import signal
import uuid

import orjson
import pytest

from conftest import Stack, stop, wait_for
from gpuledger.demo.cluster import write_capture
from gpuledger.sinks.query import WorkerQueryClient
from plans import truth_plan

pytestmark = pytest.mark.integration


def _utilization_rows_via_worker(stack: Stack) -> int:
    marker = stack.home / "process.json"
    if not marker.exists():
        return 0
    try:
        client = WorkerQueryClient(orjson.loads(marker.read_bytes())["query_url"])
        return int(client.query("SELECT count() FROM gpuledger.utilization_facts")[1][0][0])
    except Exception:  # noqa: BLE001 — worker not serving yet
        return 0


def test_sigkill_mid_run_then_restart_equals_undisturbed_run(broker, tmp_path):
    plan = truth_plan(hours=6)
    cap = write_capture(plan, tmp_path / "capture")
    expected_samples = sum(len(g) for g in plan.nodes.values()) * (plan.end_ms - plan.start_ms) // plan.scrape_every_ms
    expected_samples -= sum((b - a) // plan.scrape_every_ms for _, a, b in plan.telemetry_gaps)
    expected_samples -= sum(len(g) for g in plan.nodes.values())  # each node's last scrape waits for the next

    undisturbed = Stack(tmp_path / "undisturbed", f"t{uuid.uuid4().hex[:10]}")
    undisturbed.run("ingest", str(cap))
    undisturbed.run("process", "--until-caught-up")
    want = undisturbed.facts()
    assert len(want["utilization_facts"]) == expected_samples

    killed = Stack(tmp_path / "killed", f"t{uuid.uuid4().hex[:10]}")
    killed.run("ingest", str(cap))
    kills = []
    for threshold in (1, expected_samples // 3):
        worker = killed.start("process")
        wait_for(lambda: _utilization_rows_via_worker(killed) >= threshold, 120, f"{threshold} facts written")
        stop(worker, signal.SIGKILL)
        kills.append(worker.returncode)
    assert kills == [-signal.SIGKILL, -signal.SIGKILL]
    partial = killed.facts()
    assert 0 < len(partial["utilization_facts"]) < expected_samples  # the kills really were mid-run

    done = killed.run("process", "--until-caught-up")
    assert "resuming at checkpoint" in done.stderr
    assert killed.facts() == want
