"""A simulated cluster plan, rendered into a capture in the real formats.

A plan says which pods held which GPUs when, which tenant owned each namespace when,
where telemetry is missing and which GPUs were in maintenance. ``write_capture`` turns
it into watch events (list-then-watch ADDED, MODIFIED, DELETED, periodic BOOKMARKs),
PodResources snapshots every ``snapshot_every_ms`` per node, and dcgm-exporter scrapes
every ``scrape_every_ms`` per node. Pods start and end on snapshot instants, so the
plan's durations are the truth the engine must reproduce exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuledger.demo.builder import CaptureWriter, GpuSpec, namespace_object, pod_object
from gpuledger.demo.health import HealthSeries
from gpuledger.demo.model_metrics import model_scrape_lines
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["ClusterPlan", "MigLayout", "NamespacePlan", "PodPlan", "SharedGpu", "VmPlan", "write_capture"]


@dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    node: str
    gpus: tuple[int, ...]
    start_ms: int
    end_ms: int
    sm_active: float  # mean SM-active ratio while running
    devices: tuple[str, ...] = ()  # explicit device ids (MIG-..., GPU-...::k) instead of whole GPUs
    endpoint: str = ""  # gpuledger.io/endpoint label: a shared model endpoint's serving pod
    waits_for_mig: str = ""  # a MIG profile this pod asks for and never gets: it stays Pending
    disrupted: str = ""  # "preempted" or "evicted": the cluster ends it at end_ms (DisruptionTarget, Failed)
    created_ms: int | None = None  # created (then Pending); default: 5 s before start_ms
    bound_ms: int | None = None  # the scheduler bound it to ``node`` (PodScheduled); default: at creation
    priority_class: str = ""  # spec.priorityClassName, with spec.priority below
    priority: int = 0
    never_runs: bool = False  # deleted at end_ms while still Pending (never bound with node ""): holds no GPU

    @property
    def created_at_ms(self) -> int:
        return self.start_ms - 5_000 if self.created_ms is None else self.created_ms

    @property
    def bound_at_ms(self) -> int:
        return self.created_at_ms if self.bound_ms is None else self.bound_ms

    def sm_at(self, gpu_index: int, t_ms: int) -> float:
        """Deterministic, bounded variation around the mean."""
        wave = 0.15 * math.sin(t_ms / 600_000 + gpu_index)
        return round(min(1.0, max(0.0, self.sm_active * (1 + wave))), 6)


@dataclass(frozen=True)
class MigLayout:
    from_ms: int
    instances: tuple[tuple[str, str, int], ...]  # (mig uuid, profile, GPU instance id)


@dataclass(frozen=True)
class SharedGpu:
    """A GPU that is not exclusive: MIG layouts over time, or time-sliced replicas."""

    gpu: GpuSpec
    mode: str  # "mig" or "timeslice"
    replicas: int = 1
    layouts: tuple[MigLayout, ...] = ()

    def layout_at(self, t_ms: int) -> MigLayout | None:
        current = None
        for layout in self.layouts:
            if layout.from_ms <= t_ms:
                current = layout
        return current

    def inventory_entries(self) -> list[dict]:
        g = self.gpu
        base = {"gpu_uuid": g.uuid, "node": g.node, "model": g.model, "gpu_class": g.gpu_class, "valid_to": None}
        if self.mode == "timeslice":
            return [{**base, "mode": "timeslice", "timeslice_replicas": self.replicas,
                     "valid_from": format_rfc3339(self.layouts[0].from_ms if self.layouts else 0)}]
        return [{**base, "mode": "mig", "valid_from": format_rfc3339(layout.from_ms),
                 "mig_devices": [{"mig_uuid": u, "profile": p, "gpu_instance_id": gi, "compute_instance_id": 0}
                                 for u, p, gi in layout.instances]} for layout in self.layouts]


@dataclass(frozen=True)
class VmPlan:
    """A VM with one vGPU on a vGPU host; ``owners`` re-assign it over time."""

    host: str
    vm_name: str
    vm_uuid: str
    vgpu_uuid: str
    physical: GpuSpec
    profile: str
    start_ms: int
    end_ms: int
    owners: tuple[tuple[int, str], ...]  # (from_ms, tenant)
    sm_active: float

    def owner_at(self, t_ms: int) -> str:
        return [tenant for start, tenant in self.owners if start <= t_ms][-1]


@dataclass(frozen=True)
class NamespacePlan:
    name: str
    uid: str
    created_ms: int
    owners: tuple[tuple[int, str | None], ...]  # (from_ms, tenant) in time order; None = unlabeled
    deleted_ms: int | None = None

    def tenant_at(self, t_ms: int) -> str | None:
        current = None
        for start, tenant in self.owners:
            if start <= t_ms:
                current = tenant
        return current


@dataclass
class ClusterPlan:
    start_ms: int
    end_ms: int
    nodes: dict[str, list[GpuSpec]]
    namespaces: list[NamespacePlan]
    pods: list[PodPlan]
    telemetry_gaps: list[tuple[str, int, int]] = field(default_factory=list)  # gpu uuid, [from, to)
    unavailable: list[tuple[str, int, int, str]] = field(default_factory=list)  # gpu uuid, from, to, reason
    snapshot_every_ms: int = 30_000
    scrape_every_ms: int = 10_000
    bookmark_every_ms: int = 60_000
    cluster_id: str = "prod-ai-1"
    shared: list[SharedGpu] = field(default_factory=list)
    vms: list[VmPlan] = field(default_factory=list)
    vgpu_gpus: list[GpuSpec] = field(default_factory=list)  # physical GPUs of vGPU hosts
    vgpu_profile_weights: dict = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)  # requests.jsonl lines, verbatim
    ratecards: list[dict] = field(default_factory=list)
    quotas: list[dict] = field(default_factory=list)
    endpoints: list[dict] | None = None  # endpoints.json; None: each labelled pod's endpoint, declared for it
    health: HealthSeries | None = None  # the scrapes' health and thermal series (demo/health.py); None: none

    def endpoint_declarations(self) -> list[dict]:
        """The endpoints document: as given, else one declaration per endpoint its serving pods
        name (owner: their namespace's tenant when the first of them starts)."""
        if self.endpoints is not None:
            return self.endpoints
        out: dict[str, dict] = {}
        for p in sorted((p for p in self.pods if p.endpoint), key=lambda p: p.start_ms):
            ns = self.namespace(p.namespace, max(p.start_ms, self.start_ms))
            owner = ns.tenant_at(max(p.start_ms, self.start_ms)) if ns is not None else None
            if owner is None:
                continue
            d = out.setdefault(p.endpoint, {"endpoint_id": p.endpoint, "owner_tenant_id": owner, "namespaces": [],
                                            "valid_from": format_rfc3339(self.start_ms), "valid_to": None})
            if p.namespace not in d["namespaces"]:
                d["namespaces"].append(p.namespace)
        return list(out.values())

    def shared_gpu(self, gpu_uuid: str) -> SharedGpu | None:
        return next((g for g in self.shared if g.gpu.uuid == gpu_uuid), None)

    def all_gpus(self) -> list[GpuSpec]:
        return [g for gpus in self.nodes.values() for g in gpus]

    def namespace(self, name: str, t_ms: int) -> NamespacePlan | None:
        alive = [n for n in self.namespaces if n.name == name and n.created_ms <= t_ms
                 and (n.deleted_ms is None or t_ms < n.deleted_ms)]
        return alive[-1] if alive else None


def _watch_events(plan: ClusterPlan) -> list[tuple[int, int, str, dict]]:
    """(time, order, type, object) for namespaces and pods; resourceVersions increase with time."""
    events: list[tuple[int, int, str, dict]] = []
    for ns in plan.namespaces:
        for i, (start, tenant) in enumerate(ns.owners):
            kind = "ADDED" if i == 0 else "MODIFIED"
            t = max(start, plan.start_ms) if i == 0 else start
            events.append((t, 0, kind, namespace_object(ns.name, ns.uid, ns.created_ms, tenant)))
        if ns.deleted_ms is not None:
            last = ns.owners[-1][1]
            events.append((ns.deleted_ms, 2, "DELETED", namespace_object(ns.name, ns.uid, ns.created_ms, last)))
    for p in plan.pods:
        events += _pod_events(plan, p)
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def _pod_events(plan: ClusterPlan, p: PodPlan) -> list[tuple[int, int, str, dict]]:
    """A pod's watch events: created Pending (unbound until ``bound_at_ms``), bound, Running from
    ``start_ms`` (its container's startedAt), ended at ``end_ms``; what the plan's window shows."""
    created, bound = p.created_at_ms, p.bound_at_ms
    shown = max(created, plan.start_ms)
    n = len(p.gpus) or len(p.devices) or 1
    steps = [(shown, "ADDED", "Pending")]
    if bound > shown and p.node:
        steps.append((bound, "MODIFIED", "Pending"))
    steps += [(p.end_ms, "DELETED", "Pending")] if p.never_runs else [
        (max(p.start_ms, plan.start_ms), "MODIFIED", "Running"), (p.end_ms, "DELETED", "Succeeded")]
    if p.waits_for_mig:
        steps = [(max(p.start_ms, plan.start_ms), "ADDED", "Pending"), (p.end_ms, "DELETED", "Pending")]
    if p.disrupted:  # marked for disruption, then failed and deleted by the cluster
        steps = [*steps[:-1], (p.end_ms - 30_000, "MODIFIED", "Running"), (p.end_ms, "DELETED", "Failed")]
    out = []
    for i, (t, kind, phase) in enumerate(steps):
        if t > plan.end_ms:
            continue
        if p.waits_for_mig:
            obj = pod_object(p.namespace, p.name, p.uid, "", p.start_ms, n, phase, endpoint=p.endpoint,
                             mig_profile=p.waits_for_mig)
        else:
            is_bound, ran = bool(p.node) and bound <= t, phase != "Pending"
            obj = pod_object(p.namespace, p.name, p.uid, p.node if is_bound else "", created, n, phase,
                             endpoint=p.endpoint, scheduled_ms=bound if is_bound else None, unschedulable=not is_bound,
                             started_ms=p.start_ms if ran else None,
                             finished_ms=p.end_ms if phase in ("Succeeded", "Failed") else None,
                             priority_class=p.priority_class, priority=p.priority)
        if p.disrupted and i >= len(steps) - 2:
            obj["status"]["conditions"] = obj["status"].get("conditions", []) + _disruption_conditions(p.disrupted)
        out.append((t, 1, kind, obj))
    return out


def _disruption_conditions(how: str) -> list[dict]:
    """What the API server shows on a pod the scheduler preempted or the Eviction API evicted."""
    reason, message = (("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
                       if how == "preempted" else ("EvictionByEvictionAPI", "Eviction API: evicting"))
    return [{"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message}]


def write_capture(plan: ClusterPlan, root: Path, progress: Callable[[str], None] = lambda _: None) -> Path:
    w = CaptureWriter(root, plan.cluster_id)
    w.inventory(plan.all_gpus(), plan.start_ms, [
        {"gpu_uuid": g, "from": format_rfc3339(a), "to": format_rfc3339(b), "reason": r}
        for g, a, b, r in plan.unavailable], [e for sg in plan.shared for e in sg.inventory_entries()] + [
        {"gpu_uuid": g.uuid, "node": g.node, "model": g.model, "gpu_class": g.gpu_class, "mode": "vgpu",
         "valid_from": format_rfc3339(plan.start_ms), "valid_to": None} for g in plan.vgpu_gpus],
        vgpu_profile_weights=plan.vgpu_profile_weights)
    if plan.ratecards:
        w.document("ratecards.json", plan.ratecards)
    if plan.quotas:
        w.document("quotas.json", plan.quotas)
    if plan.endpoint_declarations():
        w.document("endpoints.json", plan.endpoint_declarations())
    bookmarks = range(plan.start_ms, plan.end_ms + 1, plan.bookmark_every_ms)
    merged = sorted([(t, 0, k, o) for t, _, k, o in _watch_events(plan)] + [(t, 1, "BOOKMARK", None) for t in bookmarks],
                    key=lambda e: (e[0], e[1]))
    w.watch_stream([(t, kind, obj) for t, _, kind, obj in merged], 1000)
    progress(f"generate: {len(merged)} watch events")

    by_node = {node: [p for p in plan.pods if p.node == node and not (p.waits_for_mig or p.never_runs)]
               for node in plan.nodes}
    for t in range(plan.start_ms, plan.end_ms + 1, plan.snapshot_every_ms):
        for node, gpus in plan.nodes.items():
            holders = {}
            for p in by_node[node]:
                if p.start_ms <= t < p.end_ms:
                    holders[(p.namespace, p.name)] = list(p.devices) or [gpus[i].uuid for i in p.gpus]
            w.snapshot(t, node, holders)
    progress("generate: PodResources snapshots written")

    total = (plan.end_ms - plan.start_ms) // plan.scrape_every_ms
    for step, t in enumerate(range(plan.start_ms, plan.end_ms, plan.scrape_every_ms)):
        if step % 2000 == 0:
            progress(f"generate: dcgm scrapes {100 * step / max(total, 1):.0f}%")
        for node, gpus in plan.nodes.items():
            readings = []
            for g in gpus:
                if any(u == g.uuid and a <= t < b for u, a, b in plan.telemetry_gaps):
                    continue
                readings += _readings(plan, by_node[node], g, t)
            w.scrape(t, node, readings, plan.health)
        for vm in plan.vms:  # dcgm-exporter inside each VM sees its vGPU, "GRID <profile>"
            if vm.start_ms <= t < vm.end_ms:
                guest = GpuSpec(vm.vgpu_uuid, vm.vm_name, 0, f"GRID {vm.profile}", vm.physical.gpu_class)
                w.scrape(t, vm.vm_name, [(guest, vm.sm_active, {})], plan.health)
    for t in range(plan.start_ms, plan.end_ms + 1, plan.snapshot_every_ms) if plan.vms else ():
        for host in sorted({vm.host for vm in plan.vms}):
            w.vgpu_snapshot(t, host, [
                {"vgpu_uuid": vm.vgpu_uuid, "physical_gpu_uuid": vm.physical.uuid, "profile": vm.profile,
                 "vm_uuid": vm.vm_uuid, "vm_name": vm.vm_name,
                 "owner": {"tenant_id": vm.owner_at(t), "project_id": f"{vm.owner_at(t)}-vms",
                           "cost_center": f"cc-{vm.owner_at(t)}"}}
                for vm in plan.vms if vm.host == host and vm.start_ms <= t < vm.end_ms])
    for line in sorted(plan.requests, key=lambda r: r["observed_at"]):
        w.request(line)
    for line in model_scrape_lines(plan.pods, plan.requests, plan.start_ms, plan.end_ms):  # the serving pods' vLLM
        w.line("model-metrics.jsonl", line)
    w.close()
    progress(f"generate: capture written to {root}")
    return root


def _who(p: PodPlan) -> dict:
    return {"namespace": p.namespace, "pod": p.name}


def _readings(plan: ClusterPlan, pods: list[PodPlan], g: GpuSpec, t: int) -> list[tuple]:
    """What dcgm-exporter reports for one GPU at ``t``, as the exporter shapes it per mode."""
    running = [p for p in pods if p.start_ms <= t < p.end_ms]
    shared = plan.shared_gpu(g.uuid)
    if shared is None:
        pod = next((p for p in running if g.index in p.gpus and not p.devices), None)
        return [(g, pod.sm_at(g.index, t), _who(pod))] if pod else [(g, 0.0, {})]
    if shared.mode == "timeslice":  # one physical series, repeated for every pod sharing the GPU
        sharing = [p for p in running if any(d.split("::")[0] == g.uuid for d in p.devices)]
        sm = round(min(1.0, sum(p.sm_at(g.index, t) for p in sharing)), 6)
        return [(g, sm, _who(p)) for p in sharing] or [(g, 0.0, {})]
    layout = shared.layout_at(t)
    out = [(g, 0.0, {})]  # the parent GPU's own series
    for mig_uuid, profile, gi in layout.instances if layout else ():
        pod = next((p for p in running if mig_uuid in p.devices), None)
        out.append((g, pod.sm_at(gi, t), _who(pod), (gi, profile)) if pod else (g, 0.0, {}, (gi, profile)))
    return out
