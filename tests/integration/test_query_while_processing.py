"""The embedded engine is single-process: while `process` runs, `showback` reads through
the worker's query endpoint (HOME/process.json) instead of opening the engine."""

import orjson
import pytest

from conftest import stop, wait_for
from gpuledger.demo.cluster import write_capture
from plans import truth_plan

pytestmark = pytest.mark.integration


def test_showback_works_while_the_worker_owns_the_engine(stack, tmp_path):
    cap = write_capture(truth_plan(), tmp_path / "capture")
    stack.run("ingest", str(cap))
    worker = stack.start("process")
    try:
        wait_for(lambda: (stack.home / "process.json").exists(), 60, "the worker's query endpoint")

        def has_tenants() -> bool:
            out = stack.run("showback", "--period", "2026-10", "--format", "json", check=False)
            return out.returncode == 0 and len(orjson.loads(out.stdout)["tenants"]) == 3

        wait_for(has_tenants, 120, "showback through the running worker")
    finally:
        stop(worker)
    assert worker.returncode == 0
    assert not (stack.home / "process.json").exists()
    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    assert len(doc["tenants"]) == 3  # and directly from the engine once the worker is gone
