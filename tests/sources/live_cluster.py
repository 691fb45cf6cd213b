"""A small live cluster for tests: one node of the real H100 scrape, its inventory and
PodResources answers, a real Kubernetes API server holding its pods, and `gpuledger produce`
processes run against these servers."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import orjson
from stack_support import GPULEDGER, Stack

from gpuledger.domain.timeutil import parse_rfc3339_ms

NODE = "gpu-node-1"  # the Hostname of the real H100 scrape
TENANT, PROJECT = "gpuledger.io/tenant", "gpuledger.io/project"
# the API server sends a namespace watch a BOOKMARK 2 s before the watch times out (a pod watch
# none): watches of 3 s keep the watch watermark moving while nothing changes
WATCH_ENV = {"GPULEDGER_WATCH_TIMEOUT_S": "3"}
GPUS = ["GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005", "GPU-bc5610b9-79c8-fedd-8899-07539c7f868a",
        "GPU-fbc2c554-4d37-8938-0032-f923bad0f716", "GPU-a65a773d-52bb-bcc1-a8ee-f78c3faa2e2d",
        "GPU-82e45d1b-1618-559f-144c-eab51545030b", "GPU-39e28159-8c62-ee71-64db-b748edd61e15",
        "GPU-e64d69ca-b4b3-59b2-e78c-94f26c4db365", "GPU-04d228d3-3b5a-3534-f5cf-969706647d56"]


def inventory() -> dict:
    return {"gpus": [{"gpu_uuid": g, "node": NODE, "model": "NVIDIA H100 80GB HBM3", "gpu_class": "H100-80GB",
                      "valid_from": "2026-01-01T00:00:00Z", "valid_to": None, "mode": "exclusive"} for g in GPUS]}


def assignments(held: dict[tuple[str, str], list[str]]) -> dict:
    return {"podResources": [{"name": name, "namespace": ns, "containers": [
        {"name": "main", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": gpus}]}]}
        for (ns, name), gpus in held.items()]}


def wait_for_bookmark(capture: Path, after_s: float, timeout_s: float = 20) -> None:
    """Wait until the capture's watch file holds a BOOKMARK observed after ``after_s``: what
    ingests it has its watch watermark past that instant."""
    path, deadline = capture / "k8s-watch.jsonl", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for raw in path.read_bytes().splitlines() if path.exists() else []:
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # a line being written
            if line["event"]["type"] == "BOOKMARK" and parse_rfc3339_ms(line["observed_at"]) > after_s * 1000:
                return
        time.sleep(0.2)
    raise AssertionError(f"no BOOKMARK observed after {after_s:.1f} in {path} within {timeout_s} s")


class Producer:
    """One `gpuledger produce SOURCE` process; stderr kept in a file."""

    def __init__(self, stack: Stack, source: str, args: list[str], logs: Path, label: str = "",
                 env: dict | None = None) -> None:
        self.stack, self.source, self.args, self.logs, self.runs = stack, source, args, logs, 0
        self.label, self.extra_env = label or source, env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.runs += 1
        err = (self.logs / f"{self.label}-{self.runs}.log").open("w")
        self.proc = subprocess.Popen([*GPULEDGER, "produce", self.source, *self.args],
                                     env={**self.stack.env(), **self.extra_env},
                                     stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(60)

    def stderr(self) -> str:
        return "".join(p.read_text() for p in sorted(self.logs.glob(f"{self.label}-*.log")))

    def metrics_url(self) -> str:
        for line in (self.logs / f"{self.label}-{self.runs}.log").read_text().splitlines():
            if "metrics at " in line:
                return line.split("metrics at ", 1)[1].strip()
        return ""


class Cluster:
    """Two tenants' pods on the H100 node, served by a real Kubernetes API server (etcd and
    kube-apiserver, sources/real_apiserver.py), a kubelet PodResources socket and a
    dcgm-exporter; changed by the test while producers run.

    No controller or kubelet runs: the pods are created bound to the node and driven through
    their lifecycle (Pending, Running, Succeeded) by patching their status. The server sets
    their uids, resourceVersions and creationTimestamps; the facts compared take their times
    from PodResources and DCGM, and the watch only says who owned a pod when.

    ``listed``: the pods as a list finds them before the test changes anything; ``changes``:
    (watch event type, object) of every change the test made afterwards, in order."""

    def __init__(self, tmp_path: Path) -> None:
        from sources.dcgm_exporter import DcgmExporter
        from sources.kubelet_podresources import KubeletPodResources
        from sources.real_apiserver import KubeCluster

        self.kube = KubeCluster(tmp_path / "kube").start()
        try:
            for ns, tenant in (("team-a", "alpha"), ("team-b", "beta")):
                self.kube.namespace(ns, {TENANT: tenant, PROJECT: f"{tenant}-default"})
            self.changes: list[tuple[str, dict]] = []
            self.p1 = self._running("team-a", "train-1", gpus=2)
            self.p2 = self._running("team-b", "serve-1", gpus=1)
        except BaseException:
            self.kube.stop()
            raise
        self.listed, self.changes = [self.p1, self.p2], []
        self.kubeconfig = self.kube.kubeconfig()
        self.p3: dict | None = None
        self.held = {("team-a", "train-1"): GPUS[0:2], ("team-b", "serve-1"): GPUS[2:3]}
        self.kubelet = KubeletPodResources(tmp_path / "kubelet.sock", response=assignments(self.held)).start()
        self.dcgm = DcgmExporter()

    def _running(self, namespace: str, name: str, gpus: int) -> dict:
        """A pod bound to the node (Pending), then Running as its kubelet would report it."""
        created = self.kube.pod(namespace, name, node=NODE, gpus=gpus)
        running = self.kube.pod_status(created, phase="Running", conditions=[{"type": "Ready", "status": "True"}])
        self.changes += [("ADDED", created), ("MODIFIED", running)]
        return running

    def replace_training_pod(self) -> None:
        """train-1 is deleted (marked, then removed); its GPUs go to a new pod, train-2."""
        self.p1 = self.kube.delete(self.p1)
        self.changes.append(("DELETED", self.p1))
        self.p3 = self._running("team-a", "train-2", gpus=2)
        self.held[("team-a", "train-2")] = self.held.pop(("team-a", "train-1"))
        self.kubelet.set_response(assignments(self.held))

    def finish_serving_pod(self) -> None:
        """serve-1 succeeds and gives its GPU back."""
        self.p2 = self.kube.pod_status(self.p2, phase="Succeeded",
                                       conditions=[{"type": "Ready", "status": "False", "reason": "PodCompleted"}])
        self.changes.append(("MODIFIED", self.p2))
        self.held.pop(("team-b", "serve-1"))
        self.kubelet.set_response(assignments(self.held))

    def stop(self) -> None:
        self.kube.stop()
        self.kubelet.stop()
        self.dcgm.stop()
