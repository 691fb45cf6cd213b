"""``gpuledger demo``: the main job, end to end on the local stack.

The demo keeps to its own topics and ClickHouse directory, named after a fingerprint of
the generated cluster, so it never mixes with other data on the same broker or home and a
changed demo never reads an older one's records.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from gpuledger.config import Settings
from gpuledger.demo.cluster import ClusterPlan, write_capture
from gpuledger.demo.plan import demo_plan
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

__all__ = ["DEMO_START", "demo_settings", "run_demo"]

DEMO_START = "2026-10-01T00:00:00Z"


def _fingerprint(plan: ClusterPlan) -> str:
    return hashlib.sha256(repr(plan).encode()).hexdigest()[:10]


def demo_settings(s: Settings, plan: ClusterPlan) -> Settings:
    fp = _fingerprint(plan)
    update = {"topic_prefix": f"{s.topic_prefix}-demo-{fp}"}
    if not s.clickhouse_dsn:
        update["clickhouse_dsn"] = f"chdb://{(s.home / f'demo-{fp}' / 'clickhouse').resolve()}"
    return s.model_copy(update=update)


def run_demo(s: Settings, out: Path | None, hours: int, progress: Callable[[str], None],
             gpuledger: Callable[[list[str], Settings], int]) -> int:
    plan = demo_plan(parse_rfc3339_ms(DEMO_START), hours)
    ds = demo_settings(s, plan)
    run = lambda argv: gpuledger(argv, ds)  # noqa: E731
    out = out or s.home / "demo-capture"
    progress("demo [1/6]: starting the local stack")
    if run(["stack", "up"]) != 0:
        return 1
    marker = out / ".ingested"
    stamp = f"{ds.topic_prefix} {ds.kafka_bootstrap}"
    if marker.exists() and marker.read_text() == stamp:
        progress(f"demo [2/6]: capture {out} already generated and ingested; reusing it")
    else:
        progress(f"demo [2/6]: generating a {hours} h capture of {len(plan.all_gpus())} GPUs on {len(plan.nodes)} "
                 f"nodes: {len(plan.pods)} pods, {len(plan.vms)} VMs, {len(plan.requests)} requests")
        shutil.rmtree(out, ignore_errors=True)
        write_capture(plan, out, progress)
        progress(f"demo [3/6]: ingesting the capture into topics {ds.topic_prefix}.*")
        if run(["ingest", str(out)]) != 0:
            return 1
        marker.write_text(stamp)
    progress("demo [4/6]: processing until caught up")
    if run(["process", "--until-caught-up"]) != 0:
        return 1
    progress("demo [5/6]: demand curves and headroom for the scheduler dashboard (gpuledger forecast --save; a "
             "forecast needs 14 days of history, so the demo's hours show the curves only)")
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the showback report
        if run(["forecast", "--save"]) != 0:
            return 1
    progress(f"demo [6/6]: showback (query it again: gpuledger --dsn {ds.effective_dsn()} showback --period 2026-10)")
    return run(["showback", "--from", DEMO_START, "--to", format_rfc3339(plan.end_ms)])
