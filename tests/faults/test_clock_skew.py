"""Fault trial: clock skew of ±5 minutes between sources.

One node's dcgm-exporter and PodResources producers run on hosts whose clocks read five
minutes ahead and five minutes behind the cluster's (``GPULEDGER_FAILPOINT_CLOCK_SKEW_S``
offsets the producer's host clock). They measure their offset to the broker's clock and
correct ``observed_at``; the facts must equal those of producers with true clocks reading
the same sources at the same time. A third pair, skewed the same way but with
``--no-clock-sync``, shows that the trial can fail: its facts differ.

All three pairs poll the same real servers on the same grid; the watch events (the cluster's
clock: a real kube-apiserver's) come from one recording, ingested into each deployment.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
import uuid

import orjson
import pytest

from gpuledger.domain.timeutil import format_rfc3339
from sources.live_cluster import GPUS, NODE, WATCH_ENV, Cluster, Producer, inventory, wait_for_bookmark
from stack_support import GPULEDGER, Stack

pytestmark = pytest.mark.integration

INTERVAL_S = 1.0
SKEW_S = {"dcgm": 300.0, "podresources": -300.0}


def _wait_until(t_s: float) -> None:
    time.sleep(max(0.0, t_s - time.time()))


def test_clock_skew_of_five_minutes_between_sources(broker, tmp_path, record_trial):
    started = time.monotonic()
    env = {"GPULEDGER_CHECKPOINT_INTERVAL_S": "0"}
    runs = {name: Stack(tmp_path / name, f"t{uuid.uuid4().hex[:10]}", env)
            for name in ("true-clocks", "skewed", "skewed-uncorrected")}
    logs = tmp_path / "logs"
    logs.mkdir()
    inventory_file = tmp_path / "inventory.json"
    inventory_file.write_bytes(orjson.dumps(inventory()))

    cluster = Cluster(tmp_path)
    kubelet, dcgm = cluster.kubelet, cluster.dcgm

    first_s = math.ceil(time.time() + 10)
    until_s = first_s + 10
    window = ["--from", format_rfc3339(first_s * 1000), "--until", format_rfc3339(until_s * 1000)]
    common = ["--cluster", "c1", "--node", NODE, "--interval", str(INTERVAL_S)]
    flags = {"dcgm": ["--dcgm-url", dcgm.url], "podresources": ["--socket", str(kubelet.socket_path)]}
    producers = []
    for run, stack in runs.items():
        for source in ("dcgm", "podresources"):
            skew = {} if run == "true-clocks" else {"GPULEDGER_FAILPOINT_CLOCK_SKEW_S": str(SKEW_S[source])}
            args = [*common, *flags[source]]
            if run == "skewed-uncorrected":
                args.append("--no-clock-sync")  # its grid is its own wrong clock: stopped by signal
            else:
                args += window
            producers.append(Producer(stack, source, args, logs, label=f"{run}-{source}", env=skew))
    k8s_capture = tmp_path / "k8s-capture"
    k8s_err = (logs / "k8s-capture.log").open("w")
    recorder = subprocess.Popen([*GPULEDGER, "capture", "--sources", "k8s", "--out", str(k8s_capture), "--for", "60s",
                                 "--cluster", "c1", "--kubeconfig", str(cluster.kubeconfig)],
                                env={**runs["true-clocks"].env(), **WATCH_ENV}, stdout=subprocess.DEVNULL, stderr=k8s_err,
                                start_new_session=True)
    try:
        for p in producers:
            p.start()
        _wait_until(first_s + 2.5)  # half-way between grid ticks: every producer sees the same answers
        cluster.replace_training_pod()
        _wait_until(first_s + 5.5)
        cluster.finish_serving_pod()
        _wait_until(until_s + 3)
        for p in producers:
            if p.label.startswith("skewed-uncorrected"):
                os.killpg(p.proc.pid, signal.SIGTERM)
        for p in producers:
            assert p.proc.wait(60) == 0, p.stderr()[-3000:]
        wait_for_bookmark(k8s_capture, until_s + 3)  # the watch watermark is past the window
        os.killpg(recorder.pid, signal.SIGTERM)
        assert recorder.wait(60) == 0, (logs / "k8s-capture.log").read_text()[-3000:]
    finally:
        for p in producers:
            if p.proc is not None and p.proc.poll() is None:
                os.killpg(p.proc.pid, signal.SIGKILL)
        if recorder.poll() is None:
            os.killpg(recorder.pid, signal.SIGKILL)
        cluster.stop()

    # each skewed producer measured its host clock five minutes off, and said so
    for p in producers:
        if p.label.startswith("skewed-") and not p.label.startswith("skewed-uncorrected"):
            said = re.search(r"is ([+-][0-9.]+)s from the broker's clock", p.stderr())
            assert said and abs(float(said.group(1)) - SKEW_S[p.source]) < 0.5, p.stderr()

    facts = {}
    for run, stack in runs.items():
        stack.run("load", "inventory", str(inventory_file), "--cluster", "c1")
        stack.run("ingest", str(k8s_capture))
        stack.run("process", "--until-caught-up")
        facts[run] = stack.facts(with_source=False)
    want, got, control = facts["true-clocks"], facts["skewed"], facts["skewed-uncorrected"]
    assert want["utilization_facts"] and want["capacity_facts"]
    ticks = (until_s - first_s) / INTERVAL_S
    # every tick of every GPU, once (the last tick waits for evidence after the window)
    assert (ticks - 1) * len(GPUS) <= len(want["utilization_facts"]) <= ticks * len(GPUS)
    lost = sum(len(set(want[t]) - set(got[t])) for t in want)
    extra = sum(len(set(got[t]) - set(want[t])) for t in want)
    differs = sum(len(set(want[t]) ^ set(control[t])) for t in want)
    record_trial(trial="clock skew", fault="dcgm host +5 min, podresources host -5 min", at="whole run",
                 outcome=f"corrected by broker clock; uncorrected control differs in {differs} facts",
                 facts=sum(len(v) for v in got.values()), lost=lost, duplicated=extra,
                 seconds=round(time.monotonic() - started, 1))
    assert (lost, extra) == (0, 0)
    assert differs > 0, "the uncorrected skew changed nothing: the trial cannot tell"
