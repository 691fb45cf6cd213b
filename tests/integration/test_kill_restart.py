"""Acceptance: SIGKILL of the `process` worker mid-run, then a restart, ends with the same
fact set in ClickHouse as an undisturbed run: nothing lost, nothing twice. Two workers of one
group, one SIGKILLed mid-stream and restarted while the other keeps going, end with the fact
set of one undisturbed worker."""

import signal
import uuid

import pytest

from conftest import Stack, stop, undisturbed_facts, wait_for
from gpuledger.demo.cluster import write_capture
from gpuledger.demo.varied import varied_plan, write_varied
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.query import WorkerQueryClient
from plans import truth_plan

pytestmark = pytest.mark.integration


def _utilization_rows_via_worker(stack: Stack) -> int:
    marker = stack.home / "process.json"
    if not marker.exists():
        return 0
    try:
        client = WorkerQueryClient.from_home(stack.home)
        return int(client.query("SELECT count() FROM gpuledger.utilization_facts")[1][0][0])
    except Exception:  # noqa: BLE001 — worker not serving yet
        return 0


def test_sigkill_mid_run_then_restart_equals_undisturbed_run(broker, tmp_path):
    """Killed twice by its own progress (a kill timed in seconds, or by the facts the sink has
    written, can land after a run that takes seconds): first once the sink wrote facts and the
    worker committed a tenth of the day's DCGM records, then, restored, at over a third. Each
    kill must find records still to process, or the test fails."""
    plan = truth_plan(hours=24)
    cap = write_capture(plan, tmp_path / "capture")
    expected_samples = sum(len(g) for g in plan.nodes.values()) * (plan.end_ms - plan.start_ms) // plan.scrape_every_ms
    expected_samples -= sum((b - a) // plan.scrape_every_ms for _, a, b in plan.telemetry_gaps)
    expected_samples -= sum(len(g) for g in plan.nodes.values())  # each node's last scrape waits for the next

    undisturbed = Stack(tmp_path / "undisturbed", f"t{uuid.uuid4().hex[:10]}")
    undisturbed.run("ingest", str(cap))
    undisturbed.run("process", "--until-caught-up")
    want = undisturbed.facts()
    assert len(want["utilization_facts"]) == expected_samples

    # commits every half second, so the committed share rises in steps a kill can land between
    killed = Stack(tmp_path / "killed", f"t{uuid.uuid4().hex[:10]}", {"GPULEDGER_CHECKPOINT_INTERVAL_S": "0.5"})
    killed.run("ingest", str(cap))
    at_kills = []
    for share, written in ((0.10, 1), (0.35, 0)):
        worker = killed.start("process")
        try:
            wait_for(lambda: killed.committed_share() >= share
                     and (not written or _utilization_rows_via_worker(killed) >= written),
                     240, f"{share:.0%} of the DCGM topic committed and {written} facts written")
        finally:
            stop(worker, signal.SIGKILL)
        assert worker.returncode == -signal.SIGKILL
        at_kills.append(killed.committed_share())
    print(f"killed at {at_kills[0]:.0%} and {at_kills[1]:.0%} of the DCGM topic committed")
    assert all(share < 1.0 for share in at_kills), f"a kill came after the worker committed the whole topic: {at_kills}"
    partial = killed.facts()
    assert 0 < len(partial["utilization_facts"]) < expected_samples  # the kills really were mid-run

    done = killed.run("process", "--until-caught-up")
    assert "restored from its changelog" in done.stderr
    assert killed.facts() == want


def test_two_workers_one_killed_and_restarted_equal_one_undisturbed_worker(broker, tmp_path):
    plan = varied_plan(10, 20, jitter=0.1, hours=4, nodes=6, gpus_per_node=2, seed=3)
    cap = write_varied(plan, tmp_path / "capture")
    want = undisturbed_facts(tmp_path / "undisturbed", cap)
    assert len(want["utilization_facts"]) > 1000 and want["capacity_facts"]
    parts = {r[-2] for r in want["utilization_facts"]}
    assert len(parts) >= 2, "the nodes spread over partitions, so each worker holds some"

    # commits every half second, so the committed share rises in steps a kill can land between
    # (at the default 5 s one commit can take the group from under 15 % to the whole topic)
    two = Stack(tmp_path / "two", f"t{uuid.uuid4().hex[:10]}", {"GPULEDGER_CHECKPOINT_INTERVAL_S": "0.5"})
    two.run("ingest", str(cap))
    sink = two.start("process", "--workers", "0")  # the sink and the query endpoint; the workers run apart
    try:
        a, b = two.start("worker", "--until-caught-up"), two.start("worker", "--until-caught-up")
        # killed once the group has committed some of the DCGM topic: the workers' own progress,
        # not the sink's (which lags the workers on a busy machine)
        wait_for(lambda: two.committed_share() >= 0.15, 240, "15 % of the DCGM topic committed by the workers")
        stop(a, signal.SIGKILL)
        at_kill = two.committed_share()
        print(f"killed at {at_kill:.0%} of the DCGM topic committed")
        assert a.returncode == -signal.SIGKILL and b.poll() is None, "the other worker keeps going"
        assert at_kill < 1.0, "killed mid-stream"
        again = two.start("worker", "--until-caught-up")
        for worker in (b, again):
            _, err = worker.communicate(timeout=300)
            assert worker.returncode == 0, err[-3000:]
    finally:
        stop(sink)
    two.run("process", "--until-caught-up")  # the sink writes what the fact topics still hold
    assert two.facts() == want


def test_two_workers_write_every_fact_once_demand_facts_included(broker, tmp_path):
    """A worker not yet (or no longer) assigned holds no unit and makes no fact: the demand facts
    only unit 0 makes came out of both workers while the second waited for its assignment."""
    plan = varied_plan(10, 20, jitter=0.1, hours=2, nodes=4, gpus_per_node=2, seed=5)
    cap = write_varied(plan, tmp_path / "capture")
    two = Stack(tmp_path / "two", f"t{uuid.uuid4().hex[:10]}")
    two.run("ingest", str(cap))
    two.run("process", "--until-caught-up", "--workers", "2")
    store = ClickHouseStore(two.dsn)
    try:
        counts = {t: store.query(f"SELECT count(), uniqExact(fact_id) FROM gpuledger.{t}")[1][0]
                  for t in ("capacity_facts", "utilization_facts", "demand_facts")}
    finally:
        store.close()
    assert all(distinct > 0 for _, distinct in counts.values()), counts
    assert {t: rows - distinct for t, (rows, distinct) in counts.items()} == dict.fromkeys(counts, 0)
