"""Capacity units: the devices PodResources hands out, and the share of a physical GPU each
one is. An exclusive GPU is one unit of 1.0; a MIG GPU is its instances, each at its
approved profile weight (default compute slices / 7), plus whatever no instance covers; a
time-sliced GPU with N replicas is N units of 1/N (a modeled share). The physical GPU of a
MIG or time-sliced device is never a unit of its own, so it is never counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.inventory import GpuEntry, Inventory

__all__ = ["Unit", "UNPARTITIONED", "units_of"]

UNPARTITIONED = "/unpartitioned"
_EPS = 1e-9


@dataclass(frozen=True)
class Unit:
    device_id: str  # as PodResources names it: GPU-..., MIG-..., GPU-...::k
    fraction: float  # GPU-equivalents
    mode: str
    profile: str
    confidence: str  # when held by a resolved tenant
    allocatable: bool = True


def units_of(inv: Inventory, gpu: GpuEntry) -> tuple[list[Unit], float]:
    """The units of one inventory GPU, and how far their fractions exceed 1 (over-allocation).
    Asked for every GPU of every capacity segment: worked out once per entry of the inventory
    in force (read the list, never change it)."""
    memo = inv.derived()
    got = memo.get(("units", id(gpu)))
    if got is None or got[0] is not gpu:
        got = memo["units", id(gpu)] = (gpu, _units_of(inv, gpu))
    return got[1]


def _units_of(inv: Inventory, gpu: GpuEntry) -> tuple[list[Unit], float]:
    if gpu.mode == "exclusive":
        return [Unit(gpu.gpu_uuid, 1.0, "exclusive", "", "high")], 0.0
    if gpu.mode == "timeslice":
        n = gpu.timeslice_replicas
        return [Unit(f"{gpu.gpu_uuid}::{k}", 1.0 / n, "timeslice", "", "modeled") for k in range(n)], 0.0
    if gpu.mode == "mig":
        units = [Unit(m.mig_uuid, inv.mig_weight(gpu.gpu_class, m.profile), "mig", m.profile, "high")
                 for m in gpu.mig_devices]
        total = sum(u.fraction for u in units)
        if total < 1.0 - _EPS:
            units.append(Unit(gpu.gpu_uuid + UNPARTITIONED, 1.0 - total, "mig", "", "", allocatable=False))
        return units, max(0.0, total - 1.0) if total > 1.0 + _EPS else 0.0
    return [], 0.0  # vGPU capacity comes from the vGPU inventory stream, not from PodResources
