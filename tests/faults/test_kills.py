"""Fault suite: randomized SIGKILLs of the `process` worker and of `ingest`, and a broker
stop/start while processing. After each trial the fact set equals the undisturbed run's:
0 lost, 0 duplicated (no fact a reader sees is missing or extra: the fact sets are compared
as readers see them, through FINAL). Rows at-least-once delivery stored twice under one fact
id are counted before FINAL and reported in the table ("raw dup rows"), not hidden. The seed
is printed; GPULEDGER_FAULT_SEED replays it.

Every trial gets its own topics and engine on the shared broker. Results: the table at the
end of the run (tests/faults/conftest.py).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from plans import expected_allocated_hours, truth_plan
from gpuledger.bus.topics import Topics, read_extents
from stack_support import BOOTSTRAP, Stack, stop, wait_for

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("GPULEDGER_FAULT_SEED", str(int(time.time()) % 100_000)))
RNG = random.Random(SEED)
# share of the day's DCGM records the worker has committed when it is killed (commits every
# 0.5 s come in steps of ~10 %, so a kill at <= 75 % lands before the last one)
WORKER_KILLS = [round(RNG.uniform(0.05, 0.75), 2) for _ in range(12)]
INGEST_KILLS = [round(RNG.uniform(0.05, 0.95), 2) for _ in range(8)]  # share of the records out at the kill


@pytest.fixture(scope="module")
def long_truth(broker, tmp_path_factory):
    """A day: long enough an ingest to be killed half-way through publishing, and a worker
    half-way through processing (seconds, here)."""
    return _undisturbed(tmp_path_factory.mktemp("faults-day"), 24)


def _undisturbed(root, hours: int):
    plan = truth_plan(hours=hours)
    capture = write_capture(plan, root / "capture")
    undisturbed = Stack(root / "undisturbed", f"t{uuid.uuid4().hex[:10]}")
    started = time.monotonic()
    undisturbed.run("ingest", str(capture))
    ingest_s = time.monotonic() - started
    undisturbed.run("process", "--until-caught-up")
    # the baseline itself is checked against the plan's truth before anything is compared with it
    doc = orjson.loads(undisturbed.run("showback", "--period", "2026-10", "--format", "json").stdout)
    assert {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]} == pytest.approx(
        expected_allocated_hours(plan), abs=1e-6)
    print(f"fault suite seed {SEED} (GPULEDGER_FAULT_SEED={SEED} replays these trials)")
    total = sum(high for _, high in read_extents(BOOTSTRAP, _sources(undisturbed.prefix)).values())
    want = undisturbed.facts(with_source=False)
    want["showback"] = _showback(undisturbed)
    return root, capture, want, ingest_s, total


def _sources(prefix: str) -> list[str]:
    return [t.name for t in Topics(prefix, 4).processed()]


def _compare(stack: Stack, want: dict) -> dict:
    """Lost and extra facts as readers see them (FINAL), the rows stored twice before FINAL
    (reported: at-least-once may write them), and whether the showback a user reads (its SQL
    is the one Grafana and docs/ use) equals the undisturbed run's."""
    got = stack.facts(with_source=False)
    lost = sum(len(set(want[t]) - set(got[t])) for t in want if t != "showback")
    extra = sum(len(set(got[t]) - set(want[t])) for t in want if t != "showback")
    showback = _showback(stack)
    return {"facts": sum(len(v) for v in got.values()), "lost": lost, "duplicated": extra,
            "raw_dup_rows": stack.raw_duplicate_rows(),
            "showback": "same" if showback == want["showback"] else f"differs at {_first_difference(want['showback'], showback)}"}


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {a!r} != {b!r}"[:300]


def _showback(stack: Stack) -> dict:
    """The showback document, its sums to 1e-9 (ClickHouse adds floats in the order it reads
    parts, so the last bits of a sum depend on how the rows were written)."""
    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    doc.pop("generated_at", None)
    return _rounded(doc)


def _rounded(value):
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


@pytest.mark.parametrize("share", WORKER_KILLS, ids=[f"worker-kill-{i}" for i in range(len(WORKER_KILLS))])
def test_sigkill_of_the_worker(long_truth, record_trial, share):
    """Killed mid-stream, by its own progress (a kill timed in seconds would land after a run
    that takes seconds): the trial fails unless the kill found records still to process."""
    root, capture, want, _, _ = long_truth
    started = time.monotonic()
    stack = Stack(root / f"w{uuid.uuid4().hex[:6]}", f"t{uuid.uuid4().hex[:10]}", {"GPULEDGER_CHECKPOINT_INTERVAL_S": "0.5"})
    stack.run("ingest", str(capture))
    worker = stack.start("process")
    try:
        wait_for(lambda: stack.committed_share() >= share, 240, f"{share:.0%} of the DCGM topic committed")
    finally:
        stop(worker, signal.SIGKILL)
    at_kill = stack.committed_share()
    assert worker.returncode == -signal.SIGKILL
    assert at_kill < 1.0, f"the worker had committed the whole topic when killed (aimed at {share:.0%})"
    done = stack.run("process", "--until-caught-up")
    outcome = "resumed from the changelogs" if "restored from its changelog" in done.stderr else "restarted from the start"
    result = _compare(stack, want)
    record_trial(trial=f"worker-kill (seed {SEED})", fault="SIGKILL process", at=f"{at_kill:.0%} committed",
                 outcome=outcome, seconds=round(time.monotonic() - started, 1), **result)
    assert (result["lost"], result["duplicated"], result["showback"]) == (0, 0, "same")


@pytest.mark.parametrize("share", INGEST_KILLS, ids=[f"ingest-kill-{i}" for i in range(len(INGEST_KILLS))])
def test_sigkill_of_ingest(long_truth, record_trial, share):
    root, capture, want, _, total = long_truth
    started = time.monotonic()
    stack = Stack(root / f"i{uuid.uuid4().hex[:6]}", f"t{uuid.uuid4().hex[:10]}")
    stack.run("stack", "up")  # topics exist before the kill, as in production
    names = _sources(stack.prefix)
    ingest = stack.start("ingest", str(capture))
    while ingest.poll() is None and sum(h for _, h in read_extents(BOOTSTRAP, names).values()) < share * total:
        time.sleep(0.02)
    stop(ingest, signal.SIGKILL)
    out = sum(high for _, high in read_extents(BOOTSTRAP, names).values())
    outcome = f"killed with {out} of {total} records out" if out < total else "had published everything"
    delay_s = round(time.monotonic() - started, 2)
    stack.run("ingest", str(capture))  # the operator runs it again: records published twice
    stack.run("process", "--until-caught-up")
    result = _compare(stack, want)
    record_trial(trial=f"ingest-kill (seed {SEED})", fault="SIGKILL ingest, re-run", at=f"{share:.0%} of records",
                 outcome=outcome, seconds=round(time.monotonic() - started, 1), **result)
    assert (result["lost"], result["duplicated"], result["showback"]) == (0, 0, "same")


def test_broker_stop_and_start_while_processing(long_truth, broker, record_trial):
    """The broker stops once the worker has committed a third of the day (mid-stream, checked)."""
    root, capture, want, _, _ = long_truth
    assert broker.owned, ("the fault suite stops and starts the broker it started: unset GPULEDGER_TEST_BOOTSTRAP, "
                          "which names a broker this run did not start")
    started = time.monotonic()
    stack = Stack(root / "broker-restart", f"t{uuid.uuid4().hex[:10]}", {"GPULEDGER_CHECKPOINT_INTERVAL_S": "0.5"})
    stack.run("ingest", str(capture))
    worker = stack.start("process", "--until-caught-up")
    wait_for(lambda: worker.poll() is not None or stack.committed_share() >= 0.3, 240, "30 % of the DCGM topic committed")
    at_stop = stack.committed_share()
    assert worker.poll() is None and at_stop < 1.0, f"the worker was done before the broker stopped ({at_stop:.0%})"
    broker.down()
    time.sleep(5)
    broker.up(progress=lambda _: None)
    try:  # the worker must ride the restart out and finish by itself: hanging, or needing a re-run, fails
        _, err = worker.communicate(timeout=240)
        outcome = f"exited {worker.returncode} by itself"
    except subprocess.TimeoutExpired:
        stop(worker, signal.SIGKILL)
        _, err = worker.communicate()
        outcome = "hung after the broker came back"
    result = _compare(stack, want) if worker.returncode == 0 else {}
    record_trial(trial="broker restart", fault="broker stop 5 s, start", at=f"{at_stop:.0%} committed",
                 outcome=outcome,
                 seconds=round(time.monotonic() - started, 1), **result)
    assert worker.returncode == 0, f"{outcome}:\n{err[-3000:]}"
    assert (result["lost"], result["duplicated"], result["showback"]) == (0, 0, "same")


def test_clickhouse_unavailable_for_a_minute(long_truth, record_trial):
    """The embedded engine cannot be taken from the worker that owns it, so its writes are
    refused at the store port (sinks/failpoint.py) for 60 s from the first write after one
    went through: mid-run however fast the day is processed (the whole day takes seconds)."""
    root, capture, want, _, _ = long_truth
    started = time.monotonic()
    stack = Stack(root / "clickhouse-outage", f"t{uuid.uuid4().hex[:10]}",
                  {"GPULEDGER_FAILPOINT_STORE_OUTAGE": "[0, 60, 1]"})
    stack.run("ingest", str(capture))
    done = stack.run("process", "--until-caught-up", timeout=400)
    assert "ClickHouse unavailable" in done.stderr and "nothing lost" in done.stderr
    back = [line.removeprefix("sink: ") for line in done.stderr.splitlines() if "ClickHouse back after" in line]
    result = _compare(stack, want)
    record_trial(trial="clickhouse outage", fault="store writes refused 60 s", at="2nd write",
                 outcome=back[0].removeprefix("process: ") if back else "?",
                 seconds=round(time.monotonic() - started, 1), **result)
    assert (result["lost"], result["duplicated"], result["showback"]) == (0, 0, "same")
