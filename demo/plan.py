"""The demo cluster: 32 H100s on 4 nodes, 7 tenants, a day of work.

It has what real clusters have: pods coming and going in groups of 1-8 GPUs, a pod name
reused by another tenant (namespace deleted and re-created), a namespace changing owner
mid-day, a telemetry gap, a GPU in maintenance, and a GPU never allocated.
"""

from __future__ import annotations

import random

from gpuledger.demo.builder import GpuSpec, det_uuid, gpu_uuid
from gpuledger.demo.cluster import ClusterPlan, NamespacePlan, PodPlan

__all__ = ["TENANTS", "demo_plan"]

TENANTS = ["finance", "research", "vision", "nlp", "recsys", "speech", "ml-platform"]
H = 3_600_000
M = 60_000
STEP = 30_000  # PodResources snapshot interval: pods start and end on these instants


def _round(ms: int) -> int:
    return ms - ms % STEP


def demo_plan(start_ms: int, hours: int = 24, seed: int = 7) -> ClusterPlan:
    rng = random.Random(seed)
    end_ms = start_ms + hours * H
    nodes = {f"gpu-node-{n}": [GpuSpec(gpu_uuid("demo", n, i), f"gpu-node-{n}", i) for i in range(8)]
             for n in range(1, 5)}
    namespaces = [NamespacePlan(f"{t}-train", det_uuid("ns", t), start_ms - 30 * 24 * H, ((start_ms - 30 * 24 * H, t),))
                  for t in TENANTS]
    shared = NamespacePlan("shared-research", det_uuid("ns", "shared-research"), start_ms - 7 * 24 * H,
                           ((start_ms - 7 * 24 * H, "research"), (start_ms + hours * H // 2, "vision")))
    scratch_old = NamespacePlan("scratch", det_uuid("ns", "scratch", 1), start_ms - 2 * 24 * H,
                                ((start_ms - 2 * 24 * H, "nlp"),), deleted_ms=start_ms + hours * H // 3)
    scratch_new = NamespacePlan("scratch", det_uuid("ns", "scratch", 2), start_ms + hours * H // 3 + 5 * M,
                                ((start_ms + hours * H // 3 + 5 * M, "speech"),))
    namespaces += [shared, scratch_old, scratch_new]
    pods: list[PodPlan] = []

    def add(ns: str, node: str, gpus: tuple[int, ...], a: int, b: int, name: str | None = None) -> None:
        name = name or f"{ns.split('-')[0]}-job-{rng.randint(1000, 9999)}-{len(pods)}"
        pods.append(PodPlan(ns, name, det_uuid("pod", ns, name, a), node, gpus, a, b, round(rng.uniform(0.05, 0.95), 3)))

    # The reused name: scratch/trainer-0 under nlp, then again under speech after re-creation.
    third = hours * H // 3
    reserved = {("gpu-node-3", (0, 1)): [(start_ms + 2 * H, start_ms + third - 30 * M),
                                        (start_ms + third + 30 * M, start_ms + third + 6 * H)]}
    add("scratch", "gpu-node-3", (0, 1), _round(start_ms + 2 * H), _round(start_ms + third - 30 * M), "trainer-0")
    add("scratch", "gpu-node-3", (0, 1), _round(start_ms + third + 30 * M), _round(start_ms + third + 6 * H), "trainer-0")
    maintenance = ("gpu-node-4", (6,))
    reserved[maintenance] = [(start_ms + 16 * H, start_ms + 18 * H)]

    groups = {"gpu-node-1": [(0, 1, 2, 3, 4, 5, 6, 7)], "gpu-node-2": [(0, 1, 2, 3), (4, 5, 6, 7)],
              "gpu-node-3": [(0, 1), (2, 3), (4, 5), (6, 7)], "gpu-node-4": [(i,) for i in range(7)]}
    choices = [f"{t}-train" for t in TENANTS] + ["shared-research"]
    for node, gs in groups.items():
        for g in gs:
            blocked = reserved.get((node, g), [])
            t = _round(start_ms + rng.randint(0, 40) * M)
            while t < end_ms:
                dur = _round(rng.randint(20, 360) * M)
                b = min(end_ms, t + dur)
                clash = next((w for w in blocked if t < w[1] and w[0] < b), None)
                if clash:
                    if clash[0] - t >= 10 * M:
                        add(rng.choice(choices), node, g, t, _round(clash[0]))
                    t = _round(clash[1]) + STEP
                    continue
                add(rng.choice(choices), node, g, t, b)
                t = _round(b + rng.randint(0, 30) * M) + STEP
    gap_gpu = nodes["gpu-node-2"][1].uuid
    return ClusterPlan(
        start_ms=start_ms, end_ms=end_ms, nodes=nodes, namespaces=namespaces, pods=pods,
        telemetry_gaps=[(gap_gpu, start_ms + 5 * H, start_ms + 5 * H + 45 * M)],
        unavailable=[(nodes["gpu-node-4"][6].uuid, start_ms + 16 * H, start_ms + 18 * H, "maintenance")],
    )
