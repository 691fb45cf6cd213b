"""The demo cluster: 32 H100s on 4 nodes plus a vGPU host with 2 A100s, 7 tenants, a day.

It has what real clusters have: pods coming and going in groups of 1-8 GPUs, a pod name
reused by another tenant (namespace deleted and re-created), a namespace changing owner
mid-day, a telemetry gap, a GPU in maintenance, a GPU never allocated; two MIG GPUs (one
re-partitioned at noon), two time-sliced GPUs with 4 replicas each, VMs on vGPUs (one
re-assigned to another owner), a shared chat endpoint called by four tenants, and DCGM health
series with a thermal slowdown, a double-bit ECC error and an XID 79 (``_health``).
"""

from __future__ import annotations

import random
from dataclasses import replace

from gpuledger.demo.builder import GpuSpec, det_uuid, gpu_uuid
from gpuledger.demo.cluster import ClusterPlan, MigLayout, NamespacePlan, PodPlan, SharedGpu, VmPlan
from gpuledger.demo.health import SW_POWER_CAP, SW_THERMAL, HealthFault, HealthSeries
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["TENANTS", "demo_plan"]

TENANTS = ["finance", "research", "vision", "nlp", "recsys", "speech", "ml-platform"]
H = 3_600_000
M = 60_000
STEP = 30_000  # PodResources snapshot interval: pods start and end on these instants
RATECARDS = [{"version": "2026-10-v1", "valid_from": "2026-10-01T00:00:00Z", "valid_to": None, "currency": "USD",
              "gpu_hour": {"H100-80GB": {"guaranteed": 2.50, "borrowed": 4.00},
                           "A100-40GB": {"guaranteed": 1.20, "borrowed": 2.00}},
              "per_million_tokens": {"input": 0.50, "output": 1.50},
              "endpoint_share_weights": {"input_tokens": 1, "output_tokens": 3},
              "overhead": {"amount": 500.00, "rule": "proportional_to_allocation"}}]


QUOTAS = [{"tenant_id": t, "gpu_class": c, "guaranteed_gpus": g, "valid_from": "2026-10-01T00:00:00Z", "valid_to": None}
          for t, c, g in (("finance", "H100-80GB", 3), ("research", "H100-80GB", 4), ("vision", "H100-80GB", 4),
                          ("nlp", "H100-80GB", 3), ("recsys", "H100-80GB", 2), ("speech", "H100-80GB", 2),
                          ("ml-platform", "H100-80GB", 4), ("finance", "A100-40GB", 0.5),
                          ("research", "A100-40GB", 0.25))]


def _round(ms: int) -> int:
    return ms - ms % STEP


class _Builder:
    def __init__(self, start_ms: int, end_ms: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.start_ms, self.end_ms = start_ms, end_ms
        self.pods: list[PodPlan] = []

    def add(self, ns: str, node: str, gpus: tuple[int, ...], a: int, b: int, name: str | None = None,
            devices: tuple[str, ...] = (), endpoint: str = "") -> None:
        name = name or f"{ns.split('-')[0]}-job-{self.rng.randint(1000, 9999)}-{len(self.pods)}"
        self.pods.append(PodPlan(ns, name, det_uuid("pod", ns, name, a), node, gpus, a, b,
                                 round(self.rng.uniform(0.05, 0.95), 3), devices, endpoint))

    def fill(self, choices: list[str], node: str, gpus: tuple[int, ...], window: tuple[int, int],
             blocked: list[tuple[int, int]] = (), devices: tuple[str, ...] = ()) -> None:
        """Jobs of 20 min to 6 h with gaps of up to 30 min, around the blocked windows."""
        t = _round(window[0] + self.rng.randint(0, 40) * M)
        while t < window[1]:
            b = min(window[1], t + _round(self.rng.randint(20, 360) * M))
            clash = next((w for w in blocked if t < w[1] and w[0] < b), None)
            if clash:
                if clash[0] - t >= 10 * M:
                    self.add(self.rng.choice(choices), node, gpus, t, _round(clash[0]), devices=devices)
                t = _round(clash[1]) + STEP
                continue
            self.add(self.rng.choice(choices), node, gpus, t, b, devices=devices)
            t = _round(b + self.rng.randint(0, 30) * M) + STEP


def _namespaces(start_ms: int, hours: int) -> list[NamespacePlan]:
    month = start_ms - 30 * 24 * H
    out = [NamespacePlan(f"{t}-train", det_uuid("ns", t), month, ((month, t),)) for t in TENANTS]
    out.append(NamespacePlan("shared-research", det_uuid("ns", "shared-research"), month,
                             ((month, "research"), (start_ms + hours * H // 2, "vision"))))
    out.append(NamespacePlan("scratch", det_uuid("ns", "scratch", 1), month, ((month, "nlp"),),
                             deleted_ms=start_ms + hours * H // 3))
    recreated = start_ms + hours * H // 3 + 5 * M
    out.append(NamespacePlan("scratch", det_uuid("ns", "scratch", 2), recreated, ((recreated, "speech"),)))
    out.append(NamespacePlan("serving", det_uuid("ns", "serving"), month, ((month, "ml-platform"),)))
    return out


def _requests(rng: random.Random, start_ms: int, end_ms: int) -> list[dict]:
    mixes = {"finance": (900, 120), "research": (300, 900), "vision": (1500, 60), "nlp": (600, 600)}
    out = []
    for tenant, (tin, tout) in mixes.items():
        for i in range(int((end_ms - start_ms) / (4 * M))):
            t = start_ms + i * 4 * M + rng.randint(1, 200) * 1000
            outcome = rng.choices(["success", "error", "cancelled"], [0.95, 0.03, 0.02])[0]
            queue, ttft = round(rng.expovariate(50), 4), round(0.05 + rng.expovariate(8), 4)
            out.append({"observed_at": format_rfc3339(t), "endpoint_id": "chat-llm", "model": "llama-3.1-70b-instruct",
                        "revision": "sha256:9f1c", "request_id": f"req-{tenant}-{i}", "tenant_id": tenant,
                        "project_id": f"{tenant}-apps", "arrived_at": format_rfc3339(t - 3_000),
                        "prompt_tokens": int(tin * rng.uniform(0.5, 1.5)),
                        "completion_tokens": int(tout * rng.uniform(0.5, 1.5)) if outcome == "success" else 0,
                        "queue_s": queue, "ttft_s": ttft, "e2e_s": round(ttft + rng.uniform(0.5, 6.0), 4),
                        "outcome": outcome})
    return out


# Priority classes as a cluster defines them (PriorityClass objects): name -> value.
PRIORITY_CLASSES = {"production-high": 100_000, "training-default": 1_000, "batch-low": 100}
_TENANT_PRIORITY = {"finance": "production-high", "ml-platform": "production-high", "research": "batch-low",
                    "nlp": "batch-low", "vision": "training-default", "recsys": "training-default",
                    "speech": "training-default"}


def _queued(pods: list[PodPlan], start_ms: int, rng: random.Random) -> list[PodPlan]:
    """Whole-GPU jobs wait for the scheduler: each gets its tenant's priority class, and most of
    those starting after the first half hour were created 1-40 min before they started, bound
    5 s-3 min before (the image pull and container start). Drawn from their own generator, so
    the rest of the plan is the same with or without them."""
    out = []
    for p in pods:
        if not p.gpus or p.devices or p.endpoint or p.namespace == "scratch":
            out.append(p)
            continue
        tenant = p.namespace.removesuffix("-train") if p.namespace.endswith("-train") else "research"
        pclass = _TENANT_PRIORITY.get(tenant, "training-default")
        created = bound = None
        if p.start_ms >= start_ms + 30 * M and rng.random() < 0.7:
            startup_ms = rng.randint(5, 180) * 1000
            bound = p.start_ms - startup_ms
            created = bound - rng.randint(1, 40 * 60) * 1000
        out.append(replace(p, created_ms=created, bound_ms=bound, priority_class=pclass,
                           priority=PRIORITY_CLASSES[pclass]))
    return out


def _health(start_ms: int, nodes: dict[str, list[GpuSpec]]) -> HealthSeries:
    """The scrapes' health series, with three faults at fixed times (no random draw):
    gpu-node-3's GPU 7 slows down for heat for 4 minutes at 02:00 (a warning); gpu-node-4's
    GPU 7, never allocated, takes a double-bit ECC error at 02:40 (its row goes to the
    remapper: a reset is pending, a warning) and falls off the bus at 03:00 (XID 79), PCIe
    replays climbing in the 20 minutes before; the DBE and the XID are critical."""
    hot, bad = nodes["gpu-node-3"][7].uuid, nodes["gpu-node-4"][7].uuid
    heat, dbe, xid = start_ms + 2 * H, start_ms + 2 * H + 40 * M, start_ms + 3 * H
    return HealthSeries(start_ms - 6 * H, (
        HealthFault(hot, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", SW_THERMAL | SW_POWER_CAP, heat, heat + 4 * M),
        HealthFault(hot, "DCGM_FI_DEV_GPU_TEMP", 88, heat, heat + 4 * M),
        HealthFault(hot, "DCGM_FI_DEV_MEMORY_TEMP", 95, heat, heat + 4 * M),
        HealthFault(bad, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1, dbe),
        HealthFault(bad, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 1, dbe),
        HealthFault(bad, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1, dbe),
        HealthFault(bad, "DCGM_FI_DEV_XID_ERRORS", 79, xid),
        HealthFault(bad, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 57, xid - 5 * M),
        HealthFault(bad, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 12, xid - 20 * M),
    ))


def demo_plan(start_ms: int, hours: int = 24, seed: int = 7) -> ClusterPlan:
    end_ms = start_ms + hours * H
    b = _Builder(start_ms, end_ms, seed)
    nodes = {f"gpu-node-{n}": [GpuSpec(gpu_uuid("demo", n, i), f"gpu-node-{n}", i) for i in range(8)]
             for n in range(1, 5)}
    choices = [f"{t}-train" for t in TENANTS] + ["shared-research"]
    whole = (start_ms, end_ms)

    # The reused name: scratch/trainer-0 under nlp, then again under speech after re-creation.
    third = hours * H // 3
    scratch = [(start_ms + 2 * H, start_ms + third - 30 * M), (start_ms + third + 30 * M, start_ms + third + 6 * H)]
    for a, z in scratch:
        b.add("scratch", "gpu-node-3", (0, 1), _round(a), _round(z), "trainer-0")
    # The first trainer-0 is preempted by the scheduler at its end.
    if b.pods[0].start_ms < b.pods[0].end_ms:
        b.pods[0] = replace(b.pods[0], disrupted="preempted")
    # The shared endpoint: ml-platform serves chat-llm on 4 GPUs all day.
    b.add("serving", "gpu-node-2", (4, 5, 6, 7), start_ms, end_ms, "chat-llm-0", endpoint="chat-llm")
    groups = {"gpu-node-1": [(0, 1, 2, 3, 4, 5, 6, 7)], "gpu-node-2": [(0, 1, 2, 3)],
              "gpu-node-3": [(0, 1), (2, 3), (4, 5), (6, 7)], "gpu-node-4": [(4,), (5,), (6,)]}
    blocked = {("gpu-node-3", (0, 1)): scratch, ("gpu-node-4", (6,)): [(start_ms + 16 * H, start_ms + 18 * H)]}
    for node, gs in groups.items():
        for g in gs:
            b.fill(choices, node, g, whole, blocked.get((node, g), []))

    # A vision job on whole GPUs is evicted (the Eviction API: a node drain) at its end.
    vision = [i for i, p in enumerate(b.pods) if p.namespace == "vision-train" and p.gpus and p.end_ms < end_ms]
    if vision:
        first = min(vision, key=lambda i: b.pods[i].start_ms)
        b.pods[first] = replace(b.pods[first], disrupted="evicted")

    b.pods = _queued(b.pods, start_ms, random.Random(seed + 1))

    # MIG: GPU 0 re-partitioned at noon, GPU 1 fixed; time-slicing: GPUs 2 and 3, 4 replicas.
    n4 = nodes["gpu-node-4"]
    mig = lambda *p: "MIG-" + det_uuid("demo-mig", *p)  # noqa: E731
    noon = _round(start_ms + hours * H // 2)
    layouts0 = (MigLayout(start_ms, ((mig(0, "a", 1), "3g.40gb", 1), (mig(0, "a", 2), "3g.40gb", 2),
                                     (mig(0, "a", 7), "1g.10gb", 7))),
                MigLayout(noon, tuple((mig(0, "b", gi), "1g.10gb", gi) for gi in range(7, 14))))
    layouts1 = (MigLayout(start_ms, ((mig(1, "a", 1), "4g.40gb", 1), (mig(1, "a", 2), "3g.40gb", 2))),)
    for layouts, end_of in ((layouts0, [noon, end_ms]), (layouts1, [end_ms])):
        for layout, until in zip(layouts, end_of):
            for mig_uuid, _, _ in layout.instances:
                b.fill(choices, "gpu-node-4", (), (layout.from_ms, until), devices=(mig_uuid,))
    for i in (2, 3):
        for k in range(4):
            b.fill(choices, "gpu-node-4", (), whole, devices=(f"{n4[i].uuid}::{k}",))

    # vGPU: two A100s on a host, four VMs; vm-3 changes owner at 10:00.
    a100 = [GpuSpec(gpu_uuid("demo-vgpu", i), "vgpu-host-1", i, "NVIDIA A100-SXM4-40GB", "A100-40GB") for i in range(2)]
    vm = lambda n, gpu, profile, owners, a=start_ms, z=end_ms: VmPlan(  # noqa: E731
        "vgpu-host-1", f"vm-{n}", det_uuid("vm", n), "GPU-" + det_uuid("demo-vgpu-dev", n), gpu, profile, a, z,
        owners, round(b.rng.uniform(0.1, 0.9), 3))
    vms = [vm(1, a100[0], "A100-20C", ((start_ms, "finance"),)),
           vm(2, a100[0], "A100-10C", ((start_ms, "research"),), start_ms, _round(start_ms + 18 * H)),
           vm(3, a100[1], "A100-20C", ((start_ms, "speech"), (_round(start_ms + 10 * H), "recsys"))),
           vm(4, a100[1], "A100-4C", ((start_ms, "vision"),), _round(start_ms + 6 * H), end_ms)]
    return ClusterPlan(
        start_ms=start_ms, end_ms=end_ms, nodes={**nodes, "vgpu-host-1": a100}, namespaces=_namespaces(start_ms, hours),
        health=_health(start_ms, nodes),
        pods=b.pods,
        telemetry_gaps=[(nodes["gpu-node-2"][1].uuid, start_ms + 5 * H, start_ms + 5 * H + 45 * M)],
        unavailable=[(n4[6].uuid, start_ms + 16 * H, start_ms + 18 * H, "maintenance")],
        shared=[SharedGpu(n4[0], "mig", layouts=layouts0), SharedGpu(n4[1], "mig", layouts=layouts1),
                *(SharedGpu(n4[i], "timeslice", replicas=4, layouts=(MigLayout(start_ms, ()),)) for i in (2, 3))],
        vms=vms, vgpu_gpus=a100, vgpu_profile_weights={"A100-4C": 0.1, "A100-10C": 0.25, "A100-20C": 0.5},
        requests=_requests(b.rng, start_ms, end_ms), ratecards=RATECARDS, quotas=QUOTAS,
    )
