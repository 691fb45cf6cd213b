"""The fleet of ``python -m gpuledger.bench.fleet``: nodes of 8 H100s, published straight to the
source topics in time order, with the truth the plan alone gives.

- DCGM: one dcgm-exporter scrape per node every ``cadence_s`` (each node on its own offset,
  ±``jitter`` of the interval, a ``missing`` fraction lost), the demo's exposition text
  (``demo.builder.dcgm_exposition``) rendered from per-GPU lines cached while the GPU's pod
  stays the same; the energy counter grows with the power drawn.
- PodResources: a full ListPodResourcesResponse per node every ``pr_cadence_s``, on a clock of
  the node's own (the JSON cached while the node's pods stay the same).
- Watch: namespaces of a few tenants, then each pod's ADDED (Pending), MODIFIED (Running) and
  DELETED; a BOOKMARK every minute on every partition and one at the end, as ingest sends them.
- Reference: the inventory (every GPU exclusive from the start).

Records, keys and partitions are what ingest publishes (node-keyed DCGM and PodResources
through ``KafkaPublisher``'s murmur2 partitioner, so they are co-partitioned). Nothing holds
the fleet's samples: memory is the pods and watch events (a few per GPU-hour of jobs).

``demo/varied.py`` is not used for this: ``write_varied`` scans every pod for every scrape and
snapshot (samples x pods), and its capture goes through files and ``ingest``'s per-line
validation. The truth follows ``VariedTruth``'s rule: a pod holds its GPUs from its node's
first PodResources snapshot at or after its start until its end (DELETED), never past the
node's last snapshot; active GPU-hours are that time times the pod's SM-active ratio.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from gpuledger.demo.builder import (DRIVER, GpuSpec, dcgm_exposition, det_uuid, gpu_uuid, namespace_object, pod_object,
                                    podresources_response)
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.capture import reference_time
from gpuledger.schemas import Codec
from gpuledger.bus.topics import Topics

__all__ = ["FleetPlan", "check_rendering", "fleet_plan", "fleet_truth", "publish_fleet"]

H, M = 3_600_000, 60_000
GPUS_PER_NODE = 8
TENANTS = ["acme", "blue", "coral", "delta", "echo", "fjord"]
LAYOUTS = [(8,), (4, 4), (4, 2, 2), (2, 2, 2, 2), (4, 2, 1, 1), (1,) * 8]  # GPU groups of a node's jobs
FAMILIES = [("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
            ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
            ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned (in %).")]
HEADS = [f"# HELP {n} {h}\n# TYPE {n} {k}" for n, k, h in FAMILIES]


@dataclass(frozen=True)
class FleetPod:
    tenant: str
    name: str
    uid: str
    node: str
    gpus: tuple[int, ...]
    start_ms: int
    end_ms: int
    sm_active: float

    @property
    def namespace(self) -> str:
        return f"{self.tenant}-train"


@dataclass
class FleetPlan:
    start_ms: int
    end_ms: int
    cadence_ms: int
    pr_cadence_ms: int
    jitter: float
    missing: float
    seed: int
    nodes: dict[str, list[GpuSpec]]
    pods: list[FleetPod]
    dcgm_offset: dict[str, int]
    pr_offset: dict[str, int]
    cluster_id: str = "fleet-1"

    def pr_first_last(self, node: str) -> tuple[int, int, int]:
        """(first, last, interval) of the node's snapshots: every interval from first, up to end inclusive."""
        first = self.start_ms + self.pr_offset[node]
        return first, first + (self.end_ms - first) // self.pr_cadence_ms * self.pr_cadence_ms, self.pr_cadence_ms


def fleet_plan(gpus: int, hours: float, cadence_s: float, pr_cadence_s: float, jitter: float = 0.1,
               missing: float = 0.0, seed: int = 7, start_ms: int = 1_790_812_800_000) -> FleetPlan:
    """Each node splits its 8 GPUs into groups (one layout per node); each group runs jobs of
    15 min to 4 h back to back with 1-20 min idle between, for a tenant drawn each time."""
    if gpus % GPUS_PER_NODE:
        raise ValueError(f"--gpus must be a multiple of {GPUS_PER_NODE} (nodes of 8 H100s), got {gpus}")
    rng = random.Random(seed)
    end = start_ms + round(hours * H)
    nodes = {f"gpu-node-{n:04d}": [GpuSpec(gpu_uuid("fleet", seed, n, i), f"gpu-node-{n:04d}", i)
                                   for i in range(GPUS_PER_NODE)] for n in range(gpus // GPUS_PER_NODE)}
    pods = []
    for node in nodes:
        first = 0
        for gi, size in enumerate(rng.choice(LAYOUTS)):
            group, first = tuple(range(first, first + size)), first + size
            t, k = start_ms + rng.randrange(0, 20 * M), 0
            while t < end - 10 * M:
                length = rng.randrange(15 * M, 4 * H)
                tenant = rng.choice(TENANTS)
                name = f"{tenant}-job-{node[9:]}-{gi}-{k}"
                pods.append(FleetPod(tenant, name, det_uuid("fleet-pod", seed, name), node, group, t,
                                     min(t + length, end), round(rng.uniform(0.2, 0.95), 4)))
                t += length + rng.randrange(M, 20 * M)
                k += 1
    cadence_ms, pr_ms = round(cadence_s * 1000), round(pr_cadence_s * 1000)
    return FleetPlan(start_ms, end, cadence_ms, pr_ms, jitter, missing, seed, nodes, pods,
                     {n: rng.randrange(cadence_ms) for n in nodes}, {n: rng.randrange(pr_ms) for n in nodes})


def fleet_truth(plan: FleetPlan) -> dict:
    """Allocated and active GPU-hours per tenant, from the plan alone (VariedTruth's rule)."""
    alloc: dict[str, float] = {}
    active: dict[str, float] = {}
    slack: dict[str, float] = {}  # active hours a pod's two edges may move: a scrape interval each
    edge_h = 2 * plan.cadence_ms * (1 + plan.jitter) / H
    for p in plan.pods:
        first, last, every = plan.pr_first_last(p.node)
        seen = first + max(0, -(-(p.start_ms - first) // every)) * every  # first snapshot at or after the start
        if seen >= p.end_ms:
            continue
        held_h = len(p.gpus) * max(0, min(p.end_ms, last) - seen) / H
        alloc[p.tenant] = alloc.get(p.tenant, 0.0) + held_h
        active[p.tenant] = active.get(p.tenant, 0.0) + held_h * p.sm_active
        slack[p.tenant] = slack.get(p.tenant, 0.0) + len(p.gpus) * p.sm_active * edge_h
    return {"allocated_gpu_hours": dict(sorted(alloc.items())), "active_gpu_hours": dict(sorted(active.items())),
            "active_edge_slack_gpu_hours": dict(sorted(slack.items())), "pods": len(plan.pods), "tenants": sorted(alloc)}


class _Node:
    """One node's exposition and PodResources, re-rendered only where a GPU's pod changes."""

    def __init__(self, plan: FleetPlan, node: str, pods: list[FleetPod], rng: random.Random) -> None:
        self.node, self.gpus = node, plan.nodes[node]
        pods = sorted(pods, key=lambda p: p.start_ms)
        self.by_gpu = [[p for p in pods if g.index in p.gpus] for g in self.gpus]
        self.ptr = [0] * len(self.gpus)
        self.current: list[FleetPod | None | bool] = [False] * len(self.gpus)  # False: not rendered yet
        self.lines: list[tuple[str, ...]] = [()] * len(self.gpus)
        self.power = [0.0] * len(self.gpus)
        self.energy = [rng.randrange(10**9, 10**10) for _ in self.gpus]  # mJ since boot
        self.last_ms: int | None = None
        self.labels = [f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.pci_bus_id}",device="nvidia{g.index}",'
                       f'modelName="{g.model}",Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER}"' for g in self.gpus]
        self.pr_pods, self.pr_next, self.pr_live, self.pr_json = pods, 0, [], ""

    def _running(self, i: int, t: int) -> FleetPod | None:
        pods, k = self.by_gpu[i], self.ptr[i]
        while k < len(pods) and pods[k].end_ms <= t:
            k += 1
        self.ptr[i] = k
        return pods[k] if k < len(pods) and pods[k].start_ms <= t else None

    def scrape(self, t: int) -> tuple[str, int]:
        """(exposition, device samples) at ``t``."""
        dt = 0 if self.last_ms is None else t - self.last_ms
        self.last_ms = t
        for i in range(len(self.gpus)):
            pod = self._running(i, t)
            if pod is not self.current[i]:
                self.current[i] = pod
                labels = self.labels[i] + (f',container="main",namespace="{pod.namespace}",pod="{pod.name}",pod_uid=""'
                                           if pod else "")
                sm = pod.sm_active if pod else 0.0
                self.power[i] = 68 + sm * 560
                self.lines[i] = (f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {round(min(100.0, sm * 100 + 3 * (sm > 0)))}",
                                 f"DCGM_FI_DEV_FB_USED{{{labels}}} {int(1024 + sm * 70000)}",
                                 f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {self.power[i]:.3f}",
                                 f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} ",
                                 f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {sm:.6f}")
            self.energy[i] += int(self.power[i] * dt)  # W x ms = mJ
        lines = self.lines
        parts = [HEADS[0], *(x[0] for x in lines), HEADS[1], *(x[1] for x in lines), HEADS[2], *(x[2] for x in lines),
                 HEADS[3], *(x[3] + str(e) for x, e in zip(lines, self.energy)), HEADS[4], *(x[4] for x in lines)]
        return "\n".join(parts) + "\n", len(self.gpus)

    def snapshot(self, t: int) -> str:
        """The node's ListPodResourcesResponse at ``t`` (proto3 JSON)."""
        changed = False
        while self.pr_next < len(self.pr_pods) and self.pr_pods[self.pr_next].start_ms <= t:
            self.pr_live.append(self.pr_pods[self.pr_next])
            self.pr_next, changed = self.pr_next + 1, True
        live = [p for p in self.pr_live if p.end_ms > t]
        if changed or len(live) != len(self.pr_live) or not self.pr_json:
            self.pr_live = live
            self.pr_json = orjson.dumps(podresources_response(
                {(p.namespace, p.name): [self.gpus[i].uuid for i in p.gpus] for p in live})).decode()
        return self.pr_json


def check_rendering(plan: FleetPlan) -> None:
    """The cached rendering is the demo's exposition text (energy counters at 0 for the check)."""
    node = next(iter(plan.nodes))
    t = plan.start_ms + min(3 * H, (plan.end_ms - plan.start_ms) // 2)
    n = _Node(plan, node, [p for p in plan.pods if p.node == node], random.Random(0))
    n.energy = [0] * len(n.gpus)
    text, _ = n.scrape(t)
    readings = [(g, p.sm_active if p else 0.0, {"namespace": p.namespace, "pod": p.name, "energy_mj": 0} if p else {})
                for g, p in zip(n.gpus, n.current)]
    if text != dcgm_exposition(node, readings):
        raise AssertionError("the fleet's exposition differs from demo.builder.dcgm_exposition")


def _watch_events(plan: FleetPlan) -> list[tuple[int, int, str, dict | None]]:
    """(time, order, type, object) of every watch event and bookmark, in time order."""
    ev = [(plan.start_ms - H, 0, "ADDED", namespace_object(f"{t}-train", det_uuid("fleet-ns", t), plan.start_ms - H, t))
          for t in TENANTS]
    for p in plan.pods:
        created = p.start_ms - 4_000
        for t, kind, phase in ((created, "ADDED", "Pending"), (p.start_ms, "MODIFIED", "Running"),
                               (p.end_ms, "DELETED", "Succeeded")):
            ev.append((t, 1, kind, pod_object(p.namespace, p.name, p.uid, p.node, created, len(p.gpus), phase)))
    ev += [(t, 2, "BOOKMARK", None) for t in range(plan.start_ms, plan.end_ms + 1, M)]
    ev.sort(key=lambda e: (e[0], e[1]))
    return ev


def fleet_references(plan: FleetPlan) -> dict[str, list[dict]]:
    """A rate card and quotas from the period's start, so a replayed period has priced lines:
    each tenant is guaranteed a twelfth of the fleet and borrows the rest it runs on."""
    start = format_rfc3339(plan.start_ms)
    gpu_class = next(iter(plan.nodes.values()))[0].gpu_class
    per_tenant = max(1, sum(len(g) for g in plan.nodes.values()) // 12)
    return {"ratecards": [{"version": "fleet-v1", "valid_from": start, "valid_to": None, "currency": "USD",
                           "gpu_hour": {gpu_class: {"guaranteed": 2.50, "borrowed": 4.00}},
                           "per_million_tokens": {"input": 0.50, "output": 1.50},
                           "overhead": {"amount": 500.00, "rule": "proportional_to_allocation"}}],
            "quotas": [{"tenant_id": t, "gpu_class": gpu_class, "guaranteed_gpus": per_tenant, "valid_from": start,
                        "valid_to": None} for t in TENANTS]}


def publish_fleet(plan: FleetPlan, publisher, topics: Topics, progress: Callable[[str], None],
                  live: bool = False) -> dict:
    """Publish the whole fleet in time order; returns counts (records per topic, device samples, bytes).
    ``live``: each record of the period is published once the wall clock reaches its event time
    (the plan should start now), as live producers would; nothing marks the end of a capture."""
    codecs = {t.name: Codec(t.schema) for t in (topics.dcgm, topics.podresources, topics.k8s, topics.reference)}
    counts = {"dcgm_records": 0, "podresources_records": 0, "watch_records": 0, "device_samples": 0, "dcgm_bytes": 0}
    cluster = plan.cluster_id
    now_ms = int(time.time() * 1000)
    held: list[tuple[int, int, str, bytes, bytes, int | None]] = []  # live: (ts, n, topic, key, value, partition)

    def put(spec, key: str, record: dict, ts: int, partition: int | None = None) -> int:
        record["ingested_at_ms"], record["cluster_id"] = (max(now_ms, ts) if live else now_ms), cluster
        value = codecs[spec.name].encode(record)
        if live and ts >= plan.start_ms:
            held.append((ts, len(held), spec.name, key.encode(), value, partition))
        else:
            publisher.publish(spec.name, key.encode(), value, ts, partition)
        return len(value)

    def release() -> None:  # live: what the tick holds, each at its own time
        for ts, _, topic, key, value, partition in sorted(held):
            wait_s = ts / 1000 - time.time()
            if wait_s > 0:
                publisher.flush()
                time.sleep(wait_s)
            publisher.publish(topic, key, value, ts, partition)
        held.clear()
        publisher.flush()

    gpus = [{"gpu_uuid": g.uuid, "node": g.node, "model": g.model, "gpu_class": g.gpu_class,
             "valid_from": format_rfc3339(plan.start_ms), "valid_to": None, "mode": "exclusive"}
            for gs in plan.nodes.values() for g in gs]
    raw = orjson.dumps({"gpus": gpus, "mig_profile_weights": {}, "vgpu_profile_weights": {}, "unavailable": []})
    ts = reference_time("inventory", raw)
    put(topics.reference, f"{cluster}/inventory", {"observed_at_ms": ts, "kind": "inventory",
                                                    "document_json": raw.decode()}, ts)
    for kind, doc in fleet_references(plan).items():
        raw = orjson.dumps(doc)
        ts = reference_time(kind, raw)
        put(topics.reference, f"{cluster}/{kind}", {"observed_at_ms": ts, "kind": kind, "document_json": raw.decode()},
            ts)
    watch_partitions = publisher.partitions(topics.k8s.name)
    events, ev_next, rv = _watch_events(plan), 0, 1000

    def watch_until(limit: int) -> None:
        nonlocal ev_next, rv
        while ev_next < len(events) and events[ev_next][0] < limit:
            t, _, kind, obj = events[ev_next]
            ev_next, rv = ev_next + 1, rv + 1
            if kind == "BOOKMARK":
                obj = {"kind": "Pod", "apiVersion": "v1", "spec": {"containers": None}, "status": {},
                       "metadata": {"resourceVersion": str(rv), "creationTimestamp": None}}
            else:
                obj["metadata"]["resourceVersion"] = str(rv)
            meta = obj["metadata"]
            record = {"observed_at_ms": t, "event_type": kind, "kind": obj["kind"], "uid": meta.get("uid", ""),
                      "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
                      "resource_version": str(rv), "object_json": orjson.dumps(obj).decode()}
            for p in range(watch_partitions) if kind == "BOOKMARK" else (None,):
                put(topics.k8s, "watch-marker" if kind == "BOOKMARK" else record["uid"], dict(record), t, p)
                counts["watch_records"] += 1

    rng = random.Random(plan.seed * 7919 + 1)
    by_node: dict[str, list[FleetPod]] = {n: [] for n in plan.nodes}
    for p in plan.pods:
        by_node[p.node].append(p)
    states = {n: _Node(plan, n, by_node[n], rng) for n in plan.nodes}
    pr_next = {n: plan.pr_first_last(n)[0] for n in plan.nodes}
    cad, span = plan.cadence_ms, plan.end_ms - plan.start_ms
    started = last_report = time.monotonic()

    def snapshots_until(limit: int) -> None:
        for node, st in states.items():
            while pr_next[node] < limit and pr_next[node] <= plan.end_ms:
                t = pr_next[node]
                put(topics.podresources, node, {"observed_at_ms": t, "node": node, "response_json": st.snapshot(t)}, t)
                counts["podresources_records"] += 1
                pr_next[node] = t + plan.pr_cadence_ms

    for tick in range(plan.start_ms, plan.end_ms, cad):
        watch_until(tick + cad)
        snapshots_until(tick + cad)
        for node, st in states.items():
            t = tick + plan.dcgm_offset[node]
            if plan.jitter:
                t += round(rng.uniform(-plan.jitter, plan.jitter) * cad)
            if not plan.start_ms <= t < plan.end_ms or (plan.missing and rng.random() < plan.missing):
                continue
            text, samples = st.scrape(t)
            counts["dcgm_bytes"] += put(topics.dcgm, node, {"observed_at_ms": t, "node": node, "exposition": text}, t)
            counts["dcgm_records"] += 1
            counts["device_samples"] += samples
        if live:
            release()
        if time.monotonic() - last_report >= 5.0:
            last_report, el = time.monotonic(), time.monotonic() - started
            done = (tick + cad - plan.start_ms) / span
            progress(f"generate: {100 * done:5.1f}% of the period, {counts['dcgm_records']} scrapes "
                     f"({counts['device_samples']} device samples), {counts['podresources_records']} snapshots, "
                     f"{counts['watch_records']} watch records; {el:.0f} s, {counts['dcgm_records'] / el:.0f} "
                     f"scrapes/s, {counts['dcgm_bytes'] / el / 1e6:.1f} MB/s, ~{el / done - el:.0f} s to go")
    if live:
        release()
        counts["seconds"] = round(time.monotonic() - started, 2)
        return counts
    snapshots_until(plan.end_ms + 1)
    watch_until(plan.end_ms + 1)
    last = max(e[0] for e in events)
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"annotations": {"gpuledger.io/end-of-capture": "true"}}}
    for p in range(watch_partitions):  # the end-of-capture bookmark, as ingest sends it
        put(topics.k8s, "watch-marker", {"observed_at_ms": last, "event_type": "BOOKMARK", "kind": "Pod", "uid": "",
                                         "namespace": "", "name": "", "resource_version": "",
                                         "object_json": orjson.dumps(obj).decode()}, last, p)
        counts["watch_records"] += 1
    progress("generate: flushing the producer")
    publisher.flush()
    counts["seconds"] = round(time.monotonic() - started, 2)
    return counts
