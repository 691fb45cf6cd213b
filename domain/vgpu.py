"""vGPU capacity: a host's consecutive vGPU snapshots make a segment ``[t_i, t_i+1)`` held as
snapshot *i* says. Each vGPU is a unit of its profile's approved weight of the physical GPU,
owned by its VM's owner (a re-assigned VM changes owner at the snapshot that shows it);
what no vGPU holds is unallocated. Weights above 1 GPU are flagged, never clipped.

Guest-side DCGM (inside the VM) reports the vGPU's own UUID: those samples are the VM's
utilization. The host's series of the physical GPU is never added to them.
"""

from __future__ import annotations

from gpuledger.domain.capacity import Piece, Segment, make_fact
from gpuledger.domain.facts import CapacityFact, SourcePos
from gpuledger.domain.inventory import Inventory

__all__ = ["VgpuHolders", "vgpu_holders", "vgpu_segment_facts"]

# vgpu uuid -> (physical gpu uuid, profile, vm uuid, vm name, tenant, project, cost centre)
VgpuHolders = dict[str, tuple[str, str, str, str, str, str, str]]
_EPS = 1e-9


def vgpu_holders(vgpus: list[dict]) -> VgpuHolders:
    return {v["vgpu_uuid"]: (v["physical_gpu_uuid"], v["profile"], v["vm_uuid"], v.get("vm_name", ""),
                             v.get("tenant_id", ""), v.get("project_id", ""), v.get("cost_center", ""))
            for v in vgpus}


def vgpu_segment_facts(inv: Inventory, cluster_id: str, host: str, start: int, end: int, holders: VgpuHolders,
                       pos: SourcePos) -> list[tuple[str, CapacityFact, Piece]]:
    seg = Segment(cluster_id, host, start, end, pos)
    out: list[tuple[str, CapacityFact, Piece]] = []
    placed: set[str] = set()
    for gpu in inv.on_node(host):
        if gpu.mode != "vgpu" or gpu.valid_from_ms >= end or (
                gpu.valid_to_ms is not None and gpu.valid_to_ms <= start):
            continue
        a0, b0 = max(start, gpu.valid_from_ms), min(end, gpu.valid_to_ms if gpu.valid_to_ms is not None else end)
        unavail = inv.unavailable_windows(gpu.gpu_uuid, a0, b0)
        cuts = sorted({a0, b0} | {t for u in unavail for t in (u.from_ms, u.to_ms) if a0 < t < b0})
        held = sorted((vu, h) for vu, h in holders.items() if h[0] == gpu.gpu_uuid)
        placed.update(vu for vu, _ in held)
        total = sum(inv.vgpu_weight(h[1]) or 0.0 for _, h in held)
        for a, b in zip(cuts, cuts[1:]):
            window = next((u for u in unavail if u.from_ms <= a < u.to_ms), None)
            for vu, h in held:
                weight = inv.vgpu_weight(h[1])
                if window is not None:
                    out.append(make_fact(seg, gpu.gpu_uuid, vu, gpu.gpu_class, "vgpu", h[1], weight or 0.0, a, b,
                                         "unavailable", None, "", window.reason or "unavailable"))
                    continue
                out.append(_held(seg, gpu.gpu_uuid, gpu.gpu_class, vu, h, weight, a, b))
            if total < 1.0 - _EPS:
                kind, reason = ("unavailable", window.reason or "unavailable") if window else ("unallocated", "")
                out.append(make_fact(seg, gpu.gpu_uuid, gpu.gpu_uuid + "/unassigned", gpu.gpu_class, "vgpu", "",
                                     1.0 - total, a, b, kind, None, "", reason))
            if total > 1.0 + _EPS:
                out.append(make_fact(seg, gpu.gpu_uuid, gpu.gpu_uuid + "/over-allocation", gpu.gpu_class, "vgpu", "",
                                     total - 1.0, a, b, "over_allocated", None, "",
                                     f"vGPU weights sum to {total:.6f} GPU: over-allocated"))
    for vu, h in sorted(holders.items()):
        if vu not in placed:
            why = (f"physical GPU {h[0]} is not in the inventory as a vGPU host GPU on {host}" if h[0] else
                   f"the physical GPU of vGPU {vu} on {host} is unknown (nvidia-smi gave no UUID for its bus id)")
            out.append(_held(seg, h[0], "unknown", vu, h, None, start, end, why))
    return out


def _held(seg: Segment, gpu_uuid: str, gpu_class: str, vgpu_uuid: str, h: tuple, weight: float | None, a: int, b: int,
          reason: str = "") -> tuple[str, CapacityFact, Piece]:
    owner = {"pod_name": h[3], "pod_uid": h[2], "workload_kind": "vm", "tenant_id": h[4], "project_id": h[5],
             "cost_center": h[6]}
    if not reason and weight is None:
        reason = f"vGPU profile {h[1]} has no approved weight in the inventory"
    if not reason and not h[4]:
        reason = f"VM {h[3] or h[2]} has no owner"
    return make_fact(seg, gpu_uuid, vgpu_uuid, gpu_class, "vgpu", h[1], weight or 0.0, a, b, "allocated", owner,
                     "unattributed" if reason else "high", reason)
