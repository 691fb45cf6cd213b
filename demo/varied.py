"""Generated clusters that vary what the demo holds fixed, with their exact truth.

The demo scrapes every 10 s on one grid with PodResources on the same grid. Real clusters
scrape every 5-60 s, with jitter and missed scrapes, and poll PodResources on a clock of their
own; capacity is retired mid-month. ``write_varied`` renders such a cluster into a capture
and ``VariedTruth`` says, from the plan alone, what the engine must find:

- allocated GPU-hours per tenant: a pod holds its GPUs from the first PodResources snapshot
  at or after its start (what the kubelet evidence can show) to its end (the watch's DELETED),
  never past the inventory's end, nor past its node's last snapshot while the cluster runs on;
- active GPU-hours: the pod's SM-active ratio (constant while it runs) over that time;
- covered hours: all of it (every missed scrape is within the staleness limit).

All times are epoch ms.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from gpuledger.demo.builder import CaptureWriter, GpuSpec, det_uuid, gpu_uuid, namespace_object, pod_object
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["VariedPlan", "VariedTruth", "varied_plan", "write_varied"]

H = 3_600_000
M = 60_000


@dataclass(frozen=True)
class VariedPod:
    tenant: str
    name: str
    uid: str
    node: str
    gpu: int
    start_ms: int
    end_ms: int
    sm_active: float


@dataclass
class VariedPlan:
    start_ms: int
    end_ms: int
    nodes: dict[str, list[GpuSpec]]
    pods: list[VariedPod]
    dcgm_times: dict[str, list[int]]  # node -> scrape instants
    pr_times: dict[str, list[int]]  # node -> snapshot instants
    retire_ms: int | None = None  # every GPU leaves the inventory then
    cluster_id: str = "varied-1"
    ratecards: list[dict] = field(default_factory=list)

    @property
    def tenants(self) -> list[str]:
        return sorted({p.tenant for p in self.pods})


def _instants(rng: random.Random, start: int, end: int, every: int, offset: int, jitter: float, missing: float) -> list[int]:
    out = []
    t = start + offset
    while t < end:
        shaken = t + (round(rng.uniform(-jitter, jitter) * every) if jitter else 0)
        if start <= shaken < end and rng.random() >= missing:
            out.append(shaken)
        t += every
    return sorted(set(out))


def varied_plan(dcgm_every_s: float, pr_every_s: float, jitter: float = 0.0, missing: float = 0.0, hours: float = 8,
                nodes: int = 2, gpus_per_node: int = 4, seed: int = 7, start_ms: int = 1_790_812_800_000,
                retire_after_h: float | None = None) -> VariedPlan:
    """Each GPU runs two or three pods of 1.5-3.5 h for 4 tenants, with idle time between;
    DCGM and PodResources on their own offsets, both with ``jitter`` (a fraction of the
    interval) and ``missing`` (a fraction of samples lost)."""
    rng = random.Random(seed)
    end = start_ms + round(hours * H)
    retire = start_ms + round(retire_after_h * H) if retire_after_h is not None else None
    stop = retire if retire is not None else end
    specs = {f"node-{n}": [GpuSpec(gpu_uuid("varied", seed, n, i), f"node-{n}", i) for i in range(gpus_per_node)]
             for n in range(nodes)}
    tenants = ["acme", "blue", "coral", "delta"]
    pods = []
    for node, gpus in specs.items():
        for g in gpus:
            t = start_ms + rng.randrange(0, 20 * M)
            k = 0
            while t < stop - 30 * M:
                length = rng.randrange(90 * M, 210 * M) + rng.randrange(1000)
                tenant = rng.choice(tenants)
                name = f"{tenant}-job-{node}-{g.index}-{k}"
                pods.append(VariedPod(tenant, name, det_uuid("varied-pod", seed, name), node, g.index, t,
                                      min(t + length, stop), round(rng.uniform(0.2, 0.95), 4)))
                t += length + rng.randrange(5 * M, 40 * M) + rng.randrange(1000)
                k += 1
    dcgm_ms, pr_ms = round(dcgm_every_s * 1000), round(pr_every_s * 1000)
    dcgm = {n: _instants(rng, start_ms, stop, dcgm_ms, 1_300, jitter, missing) for n in specs}
    pr = {n: _instants(rng, start_ms, stop + (0 if retire is not None else 1), pr_ms, 7_100 % pr_ms, jitter, missing)
          for n in specs}
    return VariedPlan(start_ms, end, specs, pods, dcgm, pr, retire)


@dataclass(frozen=True)
class VariedTruth:
    allocated_h: dict[str, float]
    active_h: dict[str, float]

    @classmethod
    def of(cls, plan: VariedPlan) -> VariedTruth:
        alloc: dict[str, float] = {}
        active: dict[str, float] = {}
        for p in plan.pods:
            seen = [t for t in plan.pr_times[p.node] if p.start_ms <= t < p.end_ms]
            if not seen:
                continue
            # the node's last snapshot waits for the next (or for its inventory's end)
            until = p.end_ms if plan.retire_ms is not None else min(p.end_ms, plan.pr_times[p.node][-1])
            held_h = max(0, until - seen[0]) / H
            alloc[p.tenant] = alloc.get(p.tenant, 0.0) + held_h
            active[p.tenant] = active.get(p.tenant, 0.0) + held_h * p.sm_active
        return cls(alloc, active)


def write_varied(plan: VariedPlan, root: Path) -> Path:
    w = CaptureWriter(root, plan.cluster_id)
    gpus = [g for gs in plan.nodes.values() for g in gs]
    w.inventory(gpus, plan.start_ms)
    if plan.retire_ms is not None:
        inv = (root / "inventory.json").read_bytes().replace(b'"valid_to": null', b'"valid_to": "%s"' % (
            format_rfc3339(plan.retire_ms).encode()))
        (root / "inventory.json").write_bytes(inv)
    if plan.ratecards:
        w.document("ratecards.json", plan.ratecards)
    events = []
    for tenant in plan.tenants:
        events.append((plan.start_ms - H, 0, "ADDED", namespace_object(f"{tenant}-ns", det_uuid("varied-ns", tenant),
                                                                       plan.start_ms - H, tenant)))
    for p in plan.pods:
        ns = f"{p.tenant}-ns"
        events.append((p.start_ms - 4_000, 1, "ADDED", pod_object(ns, p.name, p.uid, p.node, p.start_ms - 4_000, 1, "Pending")))
        events.append((p.start_ms, 1, "MODIFIED", pod_object(ns, p.name, p.uid, p.node, p.start_ms - 4_000, 1)))
        events.append((p.end_ms, 1, "DELETED", pod_object(ns, p.name, p.uid, p.node, p.start_ms - 4_000, 1, "Succeeded")))
    last_event = max(t for t, *_ in events)
    bookmarks = [(t, 2, "BOOKMARK", None) for t in range(plan.start_ms, max(plan.end_ms, last_event) + M, M)]
    w.watch_stream([(t, kind, obj) for t, _, kind, obj in sorted(events + bookmarks, key=lambda e: (e[0], e[1]))], 100)
    # files in time order, the nodes interleaved, as producers append what they observe
    snapshots = sorted((t, node) for node in plan.nodes for t in plan.pr_times[node])
    for t, node in snapshots:
        w.snapshot(t, node, {(f"{p.tenant}-ns", p.name): [plan.nodes[node][p.gpu].uuid]
                             for p in plan.pods if p.node == node and p.start_ms <= t < p.end_ms})
    for t, node in sorted((t, node) for node in plan.nodes for t in plan.dcgm_times[node]):
        readings = []
        for g in plan.nodes[node]:
            pod = next((p for p in plan.pods if p.node == node and p.gpu == g.index and p.start_ms <= t < p.end_ms),
                       None)
            readings.append((g, pod.sm_active if pod else 0.0,
                             {"namespace": f"{pod.tenant}-ns", "pod": pod.name} if pod else {}))
        w.scrape(t, node, readings)
    w.close()
    return root
