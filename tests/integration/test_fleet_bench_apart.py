"""The fleet bench's workers-apart runs on the real broker and engine: N workers read a
generated fleet to its end with no sink beside them (each counted as a process of the run),
then the sink alone writes their facts, which equal the truth and the other run's."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from stack_support import BOOTSTRAP, LIBS

pytestmark = pytest.mark.integration


def test_workers_apart_then_the_sink_alone_equal_the_truth(broker, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "GPULEDGER_HOME": str(tmp_path / "home"), "GPULEDGER_KAFKA_LIBS": str(LIBS)}
    done = subprocess.run([sys.executable, "-m", "gpuledger.bench.fleet", "--gpus", "32", "--hours", "0.5",
                           "--workers", "1,2", "--modes", "apart", "--skip-raw", "--partitions", "2",
                           "--bootstrap", BOOTSTRAP, "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    runs = orjson.loads((out / "results.json").read_bytes())["runs"]
    assert [(r["workers"], r.get("apart")) for r in runs] == [(1, True), (2, True)]
    for r in runs:
        workers = [p for p in r["cpu_s_by_process"] if p.startswith("gpuledger[")]
        assert len(workers) == r["workers"], r["cpu_s_by_process"]  # the workers ran as processes of their own
        assert r["exit"] == 0 and r["sink_wall_s"] > 0 and r["check"]["ok"], r
        assert r["facts"]["utilization_facts"]["facts"] > 0 and r["facts"]["capacity_facts"]["facts"] > 0
        assert r["facts"] == runs[0]["facts"]
    assert "| 2 apart |" in done.stdout and "then the sink alone" in done.stdout


def test_the_raw_loop_with_the_parse_parses_every_device_sample_the_fleet_holds(broker, tmp_path):
    """``--raw-parse``: the raw loop again, each exposition parsed as a worker parses it; it
    finds every device sample the generator wrote, as the raw loop's count does."""
    out = tmp_path / "out"
    env = {**os.environ, "GPULEDGER_HOME": str(tmp_path / "home"), "GPULEDGER_KAFKA_LIBS": str(LIBS)}
    done = subprocess.run([sys.executable, "-m", "gpuledger.bench.fleet", "--gpus", "16", "--hours", "0.25",
                           "--skip-worker", "--raw-parse", "--partitions", "2", "--bootstrap", BOOTSTRAP,
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    results = orjson.loads((out / "results.json").read_bytes())
    samples = results["generation"]["device_samples"]
    assert samples > 0 and results["raw"]["device_samples"] == results["raw_parse"]["device_samples"] == samples
    assert "| raw loop + parse |" in done.stdout


def test_the_native_worker_floor_reads_the_kept_topics_and_leaves_no_topic_of_its_own(broker, tmp_path):
    """``bench.worker_floor --reuse``: the raw loop, then the DCGM and PodResources topics a
    fleet run kept, through the native floor, its batch records produced to a topic it deletes."""
    from confluent_kafka.admin import AdminClient

    out = tmp_path / "out"
    env = {**os.environ, "GPULEDGER_HOME": str(tmp_path / "home"), "GPULEDGER_KAFKA_LIBS": str(LIBS)}
    made = subprocess.run([sys.executable, "-m", "gpuledger.bench.fleet", "--gpus", "16", "--hours", "0.25",
                           "--skip-worker", "--skip-raw", "--keep-topics", "--partitions", "2",
                           "--bootstrap", BOOTSTRAP, "--out", str(out)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert made.returncode == 0, made.stderr[-4000:]
    truth = orjson.loads((out / "truth.json").read_bytes())
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    try:
        done = subprocess.run([sys.executable, "-m", "gpuledger.bench.worker_floor", "--reuse",
                               str(out / "truth.json"), "--bootstrap", BOOTSTRAP], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]  # 1: a sample count differs
        assert "| native floor (DCGM and PodResources" in done.stdout
        assert f"{truth['device_samples']} samples, " in done.stdout and " produced |" in done.stdout
        left = [t for t in admin.list_topics(timeout=10).topics if t.startswith(truth["topic_prefix"])]
        assert left and not [t for t in left if t.endswith(".floor-facts")]
    finally:
        kept = [t for t in admin.list_topics(timeout=10).topics if t.startswith(truth["topic_prefix"])]
        for fut in (admin.delete_topics(kept).values() if kept else ()):
            fut.result()
