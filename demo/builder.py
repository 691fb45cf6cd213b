"""Write captures in the real wire formats: v1 Pod/Namespace watch events, kubelet
ListPodResourcesResponse (proto3 JSON), dcgm-exporter exposition text.

Used by the demo's cluster generator and by tests that need a capture with known truth.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from gpuledger.demo.health import FAMILIES as HEALTH_FAMILIES
from gpuledger.demo.health import DeviceHealth, HealthSeries
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["CaptureWriter", "GpuSpec", "dcgm_exposition", "det_uuid", "namespace_object", "pod_object",
           "podresources_response"]

DRIVER = "580.105.08"


def det_uuid(*parts: object) -> str:
    """A stable UUID from names, so generated captures are reproducible."""
    return str(uuidlib.UUID(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:32]))


def gpu_uuid(*parts: object) -> str:
    return "GPU-" + det_uuid("gpu", *parts)


@dataclass(frozen=True)
class GpuSpec:
    uuid: str
    node: str
    index: int
    model: str = "NVIDIA H100 80GB HBM3"
    gpu_class: str = "H100-80GB"

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x53 + 0x11 * self.index:02X}:00.0"


def namespace_object(name: str, uid: str, created_ms: int, tenant: str | None, project: str = "",
                     cost_center: str = "", rv: int = 1) -> dict:
    labels = {"kubernetes.io/metadata.name": name}
    if tenant is not None:
        labels.update({"gpuledger.io/tenant": tenant, "gpuledger.io/project": project or f"{tenant}-default",
                       "gpuledger.io/cost-center": cost_center or f"cc-{tenant}"})
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": uid, "resourceVersion": str(rv), "labels": labels,
                         "creationTimestamp": format_rfc3339(created_ms)},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def pod_object(namespace: str, name: str, uid: str, node: str, created_ms: int, gpus: int, phase: str = "Running",
               rv: int = 1, endpoint: str = "", mig_profile: str = "", *, scheduled_ms: int | None = None,
               unschedulable: bool = False, started_ms: int | None = None, finished_ms: int | None = None,
               priority_class: str = "", priority: int | None = None) -> dict:  # noqa: PLR0913
    """A Pod as the API server shows it. ``scheduled_ms``: the ``PodScheduled`` condition turned
    True then (bound to ``node``); ``unschedulable``: it is ``False`` (reason ``Unschedulable``)
    since creation instead; ``started_ms``: its container's ``startedAt`` (running, or terminated
    at ``finished_ms``)."""
    labels = {"app.kubernetes.io/name": name.rsplit("-", 1)[0]}
    if endpoint:
        labels["gpuledger.io/endpoint"] = endpoint
    resource = f"nvidia.com/mig-{mig_profile}" if mig_profile else "nvidia.com/gpu"
    limits = {"cpu": "8", "memory": "64Gi", resource: str(gpus)}
    status: dict = {"phase": phase, "qosClass": "Guaranteed"}
    if scheduled_ms is not None or unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False" if unschedulable else "True",
                                 "lastProbeTime": None,
                                 "lastTransitionTime": format_rfc3339(created_ms if unschedulable else scheduled_ms),
                                 **({"reason": "Unschedulable", "message": "0/4 nodes are available: "
                                     f"4 Insufficient {resource}."} if unschedulable else {})}]
    if started_ms is not None:
        state = ({"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "reason": "Completed" if phase ==
                                 "Succeeded" else "Error", "startedAt": format_rfc3339(started_ms),
                                 "finishedAt": format_rfc3339(finished_ms)}} if finished_ms is not None
                 else {"running": {"startedAt": format_rfc3339(started_ms)}})
        status["containerStatuses"] = [{"name": "main", "image": "registry.example.com/ml/train:2.4",
                                        "ready": finished_ms is None, "restartCount": 0, "started": finished_ms is None,
                                        "state": state}]
    spec = {**({"nodeName": node} if node else {}), "restartPolicy": "Never", "schedulerName": "default-scheduler",
            **({"priorityClassName": priority_class} if priority_class else {}),
            **({"priority": priority} if priority is not None else {}),
            "containers": [{"name": "main", "image": "registry.example.com/ml/train:2.4",
                            "resources": {"limits": limits, "requests": limits}}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(rv),
                         "labels": labels, "creationTimestamp": format_rfc3339(created_ms)},
            "spec": spec, "status": status}


def podresources_response(holders: dict[tuple[str, str], list[str]]) -> dict:
    """{(namespace, pod): [device ids]} -> ListPodResourcesResponse (proto3 JSON)."""
    pods = [{"name": "dcgm-exporter-x7k2p", "namespace": "gpu-operator", "containers": [{"name": "exporter"}]}]
    for (ns, pod), devices in sorted(holders.items()):
        pods.append({"name": pod, "namespace": ns, "containers": [{"name": "main", "devices": [
            {"resourceName": "nvidia.com/gpu", "deviceIds": list(devices)}]}]})
    return {"podResources": pods}


_FAMILIES = [
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned (in %)."),
]


def dcgm_exposition(node: str, readings: list[tuple], t_ms: int = 0, health: HealthSeries | None = None) -> str:
    """readings: (gpu, sm_active ratio, {"pod","namespace"} or {}[, (gpu_instance_id, profile)])
    -> exposition text. A MIG instance's series carry the parent's UUID plus GPU_I_ID and
    GPU_I_PROFILE, as dcgm-exporter writes them. With ``health``, the health and thermal
    families follow on the same series when ``t_ms`` is due (demo/health.py: values at ``t_ms``)."""
    out = []
    series = []
    for gpu, sm, who, *instance in readings:
        labels = (f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",device="nvidia{gpu.index}",'
                  f'modelName="{gpu.model}",Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER}"')
        if instance:
            labels += f',GPU_I_PROFILE="{instance[0][1]}",GPU_I_ID="{instance[0][0]}"'
        if who:
            labels += f',container="main",namespace="{who["namespace"]}",pod="{who["pod"]}",pod_uid=""'
        series.append((labels, gpu, sm, who, instance))
    for name, kind, help_text in _FAMILIES:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, _, sm, who, _ in series:
            value = {
                "DCGM_FI_DEV_GPU_UTIL": f"{round(min(100.0, sm * 100 + 3 * (sm > 0)))}",
                "DCGM_FI_DEV_FB_USED": f"{int(1024 + sm * 70000)}",
                "DCGM_FI_DEV_POWER_USAGE": f"{68 + sm * 560:.3f}",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": f"{int(who.get('energy_mj', 0)) if who else 0}",
                "DCGM_FI_PROF_SM_ACTIVE": f"{sm:.6f}",
            }[name]
            out.append(f"{name}{{{labels}}} {value}")
    if health is not None and health.due(t_ms):
        load: dict[str, float] = {}
        for _, gpu, sm, _, _ in series:
            load[gpu.uuid] = max(load.get(gpu.uuid, 0.0), sm)
        values = [(labels, health.values(DeviceHealth(gpu.uuid, load[gpu.uuid], int(1024 + sm * 70000),
                                                      instance[0][1] if instance else "", gpu.model), t_ms))
                  for labels, gpu, sm, _, instance in series]
        for name, kind, help_text in HEALTH_FAMILIES:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out += [f"{name}{{{labels}}} {v[name]}" for labels, v in values]
    return "\n".join(out) + "\n"


@dataclass
class CaptureWriter:
    """Appends lines to the capture files of one directory."""

    root: Path
    cluster_id: str = "prod-ai-1"
    _handles: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "manifest.json").write_bytes(orjson.dumps(
            {"format": "gpuledger-capture/1", "cluster_id": self.cluster_id}))

    def _fh(self, name: str):
        if name not in self._handles:
            self._handles[name] = (self.root / name).open("ab")
        return self._handles[name]

    def line(self, name: str, obj: dict) -> None:
        self._fh(name).write(orjson.dumps(obj) + b"\n")

    def raw(self, name: str, text: str) -> None:
        self._fh(name).write(text.encode() + b"\n")

    def watch(self, t_ms: int, event_type: str, obj: dict) -> None:
        self.line("k8s-watch.jsonl", {"observed_at": format_rfc3339(t_ms), "event": {"type": event_type, "object": obj}})

    def bookmark(self, t_ms: int, rv: int) -> None:
        self.watch(t_ms, "BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": str(rv), "creationTimestamp": None},
                                      "spec": {"containers": None}, "status": {}})

    def watch_stream(self, events: list[tuple[int, str, dict | None]], rv: int) -> int:
        """Watch events (``BOOKMARK`` with no object) in order, each with the next
        resourceVersion after ``rv``; returns the last one."""
        for t, kind, obj in events:
            rv += 1
            if kind == "BOOKMARK":
                self.bookmark(t, rv)
            else:
                obj["metadata"]["resourceVersion"] = str(rv)
                self.watch(t, kind, obj)
        return rv

    def snapshot(self, t_ms: int, node: str, holders: dict[tuple[str, str], list[str]]) -> None:
        self.line("podresources.jsonl", {"observed_at": format_rfc3339(t_ms), "node": node,
                                         "response": podresources_response(holders)})

    def scrape(self, t_ms: int, node: str, readings: list[tuple[GpuSpec, float, dict]],
               health: HealthSeries | None = None) -> None:
        self.line("dcgm.jsonl", {"observed_at": format_rfc3339(t_ms), "node": node,
                                 "exposition": dcgm_exposition(node, readings, t_ms, health)})

    def vgpu_snapshot(self, t_ms: int, host: str, vgpus: list[dict]) -> None:
        self.line("vgpu.jsonl", {"observed_at": format_rfc3339(t_ms), "host": host, "vgpus": vgpus})

    def request(self, obj: dict) -> None:
        self.line("requests.jsonl", obj)

    def document(self, name: str, doc) -> None:
        (self.root / name).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))

    def inventory(self, gpus: list[GpuSpec], valid_from_ms: int, unavailable: list[dict] | None = None,
                  shared: list[dict] | None = None, mig_profile_weights: dict | None = None,
                  vgpu_profile_weights: dict | None = None) -> None:
        """Exclusive entries for ``gpus`` except those ``shared`` (MIG/time-slice entries) describes."""
        special = {e["gpu_uuid"] for e in shared or []}
        entries = [{"gpu_uuid": g.uuid, "node": g.node, "model": g.model, "gpu_class": g.gpu_class,
                    "valid_from": format_rfc3339(valid_from_ms), "valid_to": None, "mode": "exclusive"}
                   for g in gpus if g.uuid not in special]
        (self.root / "inventory.json").write_bytes(orjson.dumps({
            "gpus": entries + list(shared or []),
            "mig_profile_weights": mig_profile_weights or {}, "vgpu_profile_weights": vgpu_profile_weights or {},
            "unavailable": unavailable or [],
        }, option=orjson.OPT_INDENT_2))

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()
