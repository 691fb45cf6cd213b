"""Which capacity unit(s) a DCGM device sample belongs to, as of its event time.

An exclusive GPU's sample goes to the GPU; a MIG instance's sample (parent UUID +
``GPU_I_ID``) to that instance; the parent-level series of a MIG GPU to nobody (its
instances carry the attribution, so it is never counted twice). A time-sliced GPU's one
physical series is shared by all replicas, each at its modeled 1/N: it is never summed
per sharing pod.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from operator import attrgetter

from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import DeviceSample
from gpuledger.domain.facts import SourcePos, UtilizationFact, built, fact_id
from gpuledger.domain.inventory import Inventory

__all__ = ["lookup", "overlapping", "python_utilization_fact", "sample_targets", "utilization_fact"]


_start = attrgetter("start_ms")  # a piece's start, the key the pieces are sorted by


def lookup(pieces: Sequence[Piece], t_ms: int) -> Piece | None:
    i = bisect.bisect_right(pieces, t_ms, key=_start) - 1
    if i >= 0 and pieces[i].start_ms <= t_ms < pieces[i].end_ms:
        return pieces[i]
    return None


def overlapping(pieces: Sequence[Piece], from_ms: int, to_ms: int) -> list[Piece]:
    """The pieces (sorted by start, not overlapping) that overlap ``[from_ms, to_ms)``."""
    i = max(0, bisect.bisect_right(pieces, from_ms, key=_start) - 1)
    out = []
    while i < len(pieces) and pieces[i].start_ms < to_ms:
        if pieces[i].end_ms > from_ms:
            out.append(pieces[i])
        i += 1
    return out


def sample_targets(inv: Inventory, pieces: dict[str, list[Piece]], node: str, t_ms: int,
                   s: DeviceSample) -> list[tuple[str, Piece | None, str]]:
    """(device id, covering piece or None, reason when None is final)."""
    gpu = inv.gpu(s.gpu_uuid, t_ms)
    if gpu is None:
        return [(s.gpu_uuid, None, f"GPU {s.gpu_uuid} on {node} is not in the inventory")]
    if gpu.mode == "exclusive":
        return [(s.gpu_uuid, lookup(pieces.get(s.gpu_uuid, ()), t_ms), "")]
    if gpu.mode == "mig":
        if s.gpu_instance_id is None:
            return [(s.gpu_uuid, None, "MIG parent GPU: its instances carry the attribution")]
        mig = next((m for m in gpu.mig_devices if m.gpu_instance_id == s.gpu_instance_id), None)
        if mig is None:
            return [(s.gpu_uuid, None, f"no MIG instance {s.gpu_instance_id} of {s.gpu_uuid} in the inventory")]
        return [(mig.mig_uuid, lookup(pieces.get(mig.mig_uuid, ()), t_ms), "")]
    if gpu.mode == "timeslice":
        return [(f"{s.gpu_uuid}::{k}", lookup(pieces.get(f"{s.gpu_uuid}::{k}", ()), t_ms), "")
                for k in range(gpu.timeslice_replicas)]
    return [(s.gpu_uuid, None, "vGPU host GPU: attributed through vGPU assignments")]


def python_utilization_fact(cluster_id: str, node: str, t: int, s: DeviceSample, pos: SourcePos, device: str,
                            a: int, b: int, piece: Piece | None, why: str, per_pod: dict, held: dict,
                            n_targets: int) -> UtilizationFact:
    """The part ``[a, b)`` of the sample at ``t`` of ``device``, over ``piece`` (or none, with
    the reason ``why``). The part starting at the sample keeps the sample's id.
    ``utilization_fact`` is this in C where the C module is built (domain/_facts.c)."""
    if piece is None and not why:
        why = f"no capacity fact covers {device}"
    ratio = s.sm_active_ratio
    if piece is not None and piece.kind == "allocated" and piece.confidence != "unattributed":
        confidence, kind = piece.confidence, "allocated"
        own = per_pod.get((piece.namespace, piece.pod_name))
        if own is not None and piece.pod_uid in held:  # the pod's own series: relative to the share it holds
            ratio = min(1.0, own * n_targets / held[piece.pod_uid])
            confidence = "medium"
    else:
        kind, confidence = (piece.kind if piece else "unknown"), "unattributed"
        if piece is not None:
            why = piece.reason or f"device {piece.kind}"
    fid = fact_id("utilization", cluster_id, device, t, *([a] if a != t else []))
    return built(UtilizationFact, {
        "fact_id": fid, "cluster_id": cluster_id, "gpu_uuid": s.gpu_uuid, "device_id": device, "node": node,
        "observed_at_ms": t, "span_ms": max(0, b - a), "sm_active_ratio": ratio, "fb_used_bytes": s.fb_used_bytes,
        "power_w": s.power_w, "energy_j": s.energy_j, "capacity_fact_id": piece.fact_id if piece else "",
        "kind": kind, "tenant_id": piece.tenant_id if piece else "", "project_id": piece.project_id if piece else "",
        "namespace": piece.namespace if piece else "", "pod_name": piece.pod_name if piece else "",
        "pod_uid": piece.pod_uid if piece else "", "confidence": confidence, "reason": why,
        "src_topic": pos.topic, "src_partition": pos.partition, "src_offset": pos.offset})


try:  # built at install (pyproject.toml); a source tree without the build builds them in Python
    from gpuledger.domain import _facts
except ImportError:  # pragma: no cover — tests/unit/domain/test_facts_c.py requires it
    utilization_fact = python_utilization_fact
    utilization_body = None
else:
    _facts.setup(python_utilization_fact, UtilizationFact, Piece, SourcePos)
    utilization_fact = _facts.utilization_fact
    # (Avro body or fact, confidence): the body once the worker's writer is set
    # (streams/fact_batches.py ``encode_fact_bodies``), the fact until then
    utilization_body = _facts.utilization_body
