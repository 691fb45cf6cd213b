"""The main job as a user runs it, and the stack commands."""

import orjson
import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_end_to_end_and_prints_showback(stack):
    out = stack.run("demo", "--hours", "2", timeout=600)
    assert "demo [6/6]: showback" in out.stderr and "forecast: saved" in out.stderr
    assert "rejected (dead-lettered) lines: 0" in out.stdout  # the ingest summary
    table = out.stdout[out.stdout.index("showback "):]
    for tenant in ("finance", "research", "vision"):
        assert tenant in table
    assert "platform GPU-hours: physical 68.000" in table  # 32 H100s + 2 vGPU-host A100s, 2 h
    assert "difference 0.000" in table
    doc = orjson.loads(stack.run("showback", "--from", "2026-10-01T00:00:00Z", "--to", "2026-10-01T02:00:00Z",
                                 "--format", "json").stdout)
    assert len(doc["tenants"]) >= 6
    modes = {m for t in doc["tenants"] for m, h in t["allocated_by_mode"].items() if h > 0}
    assert modes == {"exclusive", "mig", "timeslice", "vgpu"}  # every sharing mode is in the demo
    (ep,) = doc["endpoints"]
    assert ep["endpoint_id"] == "chat-llm" and len(ep["shares"]) == 4
    assert sum(s["micro_gpu_hours"] for s in ep["shares"]) == ep["allocated_micro_gpu_hours"]
    p = doc["platform"]
    assert p["unavailable_gpu_hours"] == 0  # the maintenance window is at 16:00, outside these 2 h
    assert p["physical_gpu_hours"] == pytest.approx(p["allocated_gpu_hours"] + p["unallocated_gpu_hours"], abs=1e-9)
    again = stack.run("demo", "--hours", "2", timeout=600)  # idempotent: reuses the ingested capture
    assert "already generated and ingested" in again.stderr
    assert again.stdout[again.stdout.index("showback "):] == table


def test_stack_status_and_idempotent_up(stack):
    status = orjson.loads(stack.run("stack", "status", check=False).stdout)
    assert status["kafka"]["reachable"] is True
    up = stack.run("stack", "up")
    assert "using the broker already answering" in up.stderr
    assert stack.run("stack", "up").returncode == 0


def test_bad_period_exits_2_with_reason(stack):
    out = stack.run("showback", "--period", "2026-13", check=False)
    assert out.returncode == 2 and "--period must be YYYY-MM" in out.stderr
    out = stack.run("ingest", str(stack.home / "nowhere"), check=False)
    assert out.returncode == 2 and "manifest.json" in out.stderr
