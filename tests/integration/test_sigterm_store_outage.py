"""SIGTERM stops the worker within seconds even while ClickHouse refuses its writes (the retry's
backoff is cut short), with exit 1 and the reason; nothing after the last checkpoint was
acknowledged, so a restart once the store is back gives every fact. A table that cannot be
written whatever the rows stops the worker with exit 1, naming the table and the fix."""

import os
import signal
import subprocess
import time

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.schemas import Codec
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.query import WorkerQueryClient
from plans import expected_allocated_hours, truth_plan
from stack_support import BOOTSTRAP, GPULEDGER, stop, wait_for

pytestmark = pytest.mark.integration

T0_MS = 1_790_812_800_000  # 2026-10-01T00:00:00Z


def test_sigterm_during_a_store_outage_stops_within_seconds_and_a_restart_loses_nothing(stack, tmp_path):
    plan = truth_plan()
    stack.run("ingest", str(write_capture(plan, tmp_path / "capture")))
    log = tmp_path / "process.log"
    outage = {**stack.env(), "GPULEDGER_FAILPOINT_STORE_OUTAGE": "[0, 3600]"}  # every write refused
    with log.open("w") as err:
        worker = subprocess.Popen([*GPULEDGER, "process"], env=outage, stdout=subprocess.DEVNULL, stderr=err,
                                  text=True, start_new_session=True)
    try:
        try:
            wait_for(lambda: log.read_text().count("ClickHouse unavailable") >= 4, 180, "the worker retrying writes")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its log:\n{log.read_text()[-3000:]}") from None
        sent = time.monotonic()
        os.killpg(worker.pid, signal.SIGTERM)
        code = worker.wait(30)
        took = time.monotonic() - sent
    finally:
        stop(worker, signal.SIGKILL)
    text = log.read_text()
    print(f"SIGTERM to exit during the outage: {took:.2f}s")
    assert took < 10, f"SIGTERM took {took:.1f}s:\n{text[-3000:]}"
    assert code == 1, text[-3000:]
    assert "stopped while ClickHouse refused writes" in text and "loses nothing" in text

    done = stack.run("process", "--until-caught-up")  # the store is back
    assert "caught up" in done.stderr
    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    got = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    assert got and got == pytest.approx(expected_allocated_hours(plan), abs=1e-6)


def test_a_dropped_table_stops_the_worker_with_exit_1_naming_the_table_and_the_fix(stack, tmp_path):
    stack.run("ingest", str(write_capture(truth_plan(hours=1), tmp_path / "capture")))
    log = tmp_path / "process.log"
    with log.open("w") as err:
        worker = subprocess.Popen([*GPULEDGER, "process"], env={**stack.env(), "GPULEDGER_FAILPOINT_DROP_TABLE": "request_facts"},
                                  stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True)
    try:
        wait_for(lambda: (stack.home / "process.json").exists() and "samples waiting" in log.read_text(), 180,
                 "the worker serving queries")
        client = WorkerQueryClient.from_home(stack.home)
        with pytest.raises(StoreError, match="readonly mode"):  # the query endpoint cannot drop it back
            client.query("DROP TABLE gpuledger.capacity_facts")
        pub = KafkaPublisher(BOOTSTRAP)
        pub.publish(f"{stack.prefix}.source.requests", b"chat", Codec("request_event").encode({
            "observed_at_ms": T0_MS, "ingested_at_ms": int(time.time() * 1000), "cluster_id": "prod-ai-1",
            "endpoint_id": "chat", "model": "m", "revision": "", "request_id": "r-1", "tenant_id": "alpha",
            "project_id": "", "arrived_at_ms": T0_MS, "prompt_tokens": 10, "completion_tokens": 5, "queue_s": None,
            "ttft_s": None, "e2e_s": None, "outcome": "success"}), T0_MS)
        pub.flush()
        code = worker.wait(120)
    finally:
        stop(worker, signal.SIGKILL)
    text = log.read_text()
    assert code == 1, text[-3000:]
    assert "refuses every write to gpuledger.request_facts" in text and "Fix:" in text, text[-3000:]
    assert "StoreRejected" not in text  # no row was blamed
