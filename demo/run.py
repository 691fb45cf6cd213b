"""``gpuledger demo``: the main job, end to end on the local stack."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from gpuledger.config import Settings
from gpuledger.demo.cluster import write_capture
from gpuledger.demo.plan import demo_plan
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

__all__ = ["DEMO_START", "run_demo"]

DEMO_START = "2026-10-01T00:00:00Z"


def run_demo(s: Settings, out: Path | None, hours: int, progress: Callable[[str], None],
             gpuledger: Callable[[list[str]], int]) -> int:
    start_ms = parse_rfc3339_ms(DEMO_START)
    plan = demo_plan(start_ms, hours)
    out = out or s.home / "demo-capture"
    progress("demo [1/5]: starting the local stack")
    if gpuledger(["stack", "up"]) != 0:
        return 1
    marker = out / ".ingested"
    stamp = f"{DEMO_START} {hours}h {s.kafka_bootstrap} {s.topic_prefix}"
    if marker.exists() and marker.read_text() == stamp:
        progress(f"demo [2/5]: capture {out} already generated and ingested; reusing it")
    else:
        progress(f"demo [2/5]: generating a {hours} h capture of {len(plan.all_gpus())} GPUs on {len(plan.nodes)} "
                 f"nodes, {len(plan.pods)} pods")
        shutil.rmtree(out, ignore_errors=True)
        write_capture(plan, out, progress)
        progress("demo [3/5]: ingesting the capture into Kafka")
        if gpuledger(["ingest", str(out)]) != 0:
            return 1
        marker.write_text(stamp)
    progress("demo [4/5]: processing until caught up")
    if gpuledger(["process", "--until-caught-up"]) != 0:
        return 1
    progress("demo [5/5]: showback")
    return gpuledger(["showback", "--from", DEMO_START, "--to", format_rfc3339(plan.end_ms)])
