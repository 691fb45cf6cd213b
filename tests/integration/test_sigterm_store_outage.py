"""SIGTERM stops the worker within seconds even while ClickHouse refuses its writes (the retry's
backoff is cut short), with exit 1 and the reason; nothing after the last checkpoint was
acknowledged, so a restart once the store is back gives every fact."""

import os
import signal
import subprocess
import time

import orjson
import pytest

from conftest import GPULEDGER, stop, wait_for
from gpuledger.demo.cluster import write_capture
from plans import expected_allocated_hours, truth_plan

pytestmark = pytest.mark.integration


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
    assert took < 10, f"SIGTERM took {took:.1f}s:\n{text[-3000:]}"
    assert code == 1, text[-3000:]
    assert "stopped while ClickHouse refused writes" in text and "loses nothing" in text

    done = stack.run("process", "--until-caught-up")  # the store is back
    assert "caught up" in done.stderr
    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    got = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    assert got and got == pytest.approx(expected_allocated_hours(plan), abs=1e-6)
