"""A small live cluster for tests: one node of the real H100 scrape, its inventory and
PodResources answers, and `gpuledger produce` processes run against the test servers."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from stack_support import GPULEDGER, Stack

NODE = "gpu-node-1"  # the Hostname of the real H100 scrape
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
    """Two tenants' pods on the H100 node, served by a Kubernetes API (list and watch), a
    kubelet PodResources socket and a dcgm-exporter; changed by the test while producers run."""

    def __init__(self, tmp_path: Path) -> None:
        from sources.dcgm_exporter import DcgmExporter
        from sources.kube_apiserver import KubeApiServer, namespace, pod
        from sources.kubelet_podresources import KubeletPodResources

        self._pod = pod
        self.api = KubeApiServer(bookmark_interval_s=0.3).start()
        for ns, tenant in (("team-a", "alpha"), ("team-b", "beta")):
            self.api.add(namespace(ns, tenant=tenant))
        self.p1 = self.api.add(pod("train-1", "team-a", node=NODE))
        self.p2 = self.api.add(pod("serve-1", "team-b", node=NODE))
        self.p3: dict | None = None
        self.held = {("team-a", "train-1"): GPUS[0:2], ("team-b", "serve-1"): GPUS[2:3]}
        self.kubelet = KubeletPodResources(tmp_path / "kubelet.sock", response=assignments(self.held)).start()
        self.dcgm = DcgmExporter()

    def replace_training_pod(self) -> None:
        """train-1 ends; its GPUs go to a new pod, train-2."""
        self.api.delete(self.p1)
        self.p3 = self.api.add(self._pod("train-2", "team-a", node=NODE))
        self.held[("team-a", "train-2")] = self.held.pop(("team-a", "train-1"))
        self.kubelet.set_response(assignments(self.held))

    def finish_serving_pod(self) -> None:
        """serve-1 succeeds and gives its GPU back."""
        self.api.modify(dict(self.p2, status={**self.p2["status"], "phase": "Succeeded"}))
        self.held.pop(("team-b", "serve-1"))
        self.kubelet.set_response(assignments(self.held))

    def stop(self) -> None:
        self.api.stop()
        self.kubelet.stop()
        self.dcgm.stop()
