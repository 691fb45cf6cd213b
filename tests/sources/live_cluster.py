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


