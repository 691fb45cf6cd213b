"""Workers run apart from the sink (`gpuledger worker`, as with a ClickHouse server, or as the
fleet bench's workers-apart runs): once they have read every source partition, `gpuledger
process --workers 0 --until-caught-up` writes what the fact topics hold and exits 0, and the
facts equal those of one `process --until-caught-up`."""

import uuid

import pytest

from conftest import Stack, undisturbed_facts
from gpuledger.demo.varied import varied_plan, write_varied

pytestmark = pytest.mark.integration


def test_workers_apart_then_the_sink_alone_catches_up(broker, tmp_path):
    plan = varied_plan(10, 20, jitter=0.1, hours=2, nodes=4, gpus_per_node=2, seed=11)
    cap = write_varied(plan, tmp_path / "capture")
    want = undisturbed_facts(tmp_path / "together", cap)
    assert len(want["utilization_facts"]) > 500 and want["capacity_facts"]

    apart = Stack(tmp_path / "apart", f"t{uuid.uuid4().hex[:10]}")
    apart.run("ingest", str(cap))
    workers = [apart.start("worker", "--until-caught-up") for _ in range(2)]
    for worker in workers:
        _, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-3000:]
    assert apart.committed_share() == 1.0, "the workers read every source record before the sink started"

    done = apart.run("process", "--workers", "0", "--until-caught-up", timeout=240)
    assert "caught up" in done.stderr, done.stderr[-2000:]
    assert apart.facts() == want
