"""Capacity facts for one node's PodResources segment ``[start, end)``.

Every capacity unit of every inventory GPU on the node gets facts covering the segment:
``allocated`` (to the pod the snapshot named, resolved by UID as of the snapshot time, and
to the namespace's tenant as of each instant), ``unallocated`` or ``unavailable``. Pieces
are cut where a maintenance window, a pod's end or a namespace owner change falls inside
the segment. MIG weights above 1 GPU are flagged with an ``over_allocated`` fact, never
clipped. A device held outside the approved inventory (absent from it, or outside its
validity) is kept as ``outside_inventory`` evidence, unattributed, with a reason naming the
GPU: it is no physical capacity, so no tenant is charged for it until the inventory says so.

Consecutive segments that change nothing for a unit make one fact (``merge_runs``): the
caller hands over the segments that start in one aligned window (``CAPACITY_WINDOW_MS``),
and a unit's facts that touch and agree on everything but their bounds and source record
become one, named by the first snapshot. A fact never spans segments of two windows, so
where a window's facts end depends only on the snapshots in it, never on read order.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass

from gpuledger.domain.facts import CapacityFact, SourcePos, built, fact_id
from gpuledger.domain.inventory import GpuEntry, Inventory, Unavailability
from gpuledger.domain.k8s import OwnershipBook, PodLife
from gpuledger.domain.units import Unit, units_of

__all__ = ["CAPACITY_WINDOW_MS", "Holders", "Piece", "Segment", "make_fact", "merge_runs", "run_facts", "same_pods",
           "segment_facts"]

CAPACITY_WINDOW_MS = 60_000  # segments starting in one such aligned window may merge into one fact

Holders = dict[str, tuple[str, str, str, str]]  # device id -> (namespace, pod, container, resource)


@dataclass(frozen=True, slots=True)  # (slots: read in C at their offsets)
class Piece:
    """A capacity fact as samples need it for lookups. Frozen: a piece cut short is replaced by
    another (the utilization facts in C keep what they read of a piece, domain/_facts.c)."""

    start_ms: int
    end_ms: int
    fact_id: str
    kind: str
    tenant_id: str
    project_id: str
    namespace: str
    pod_name: str
    pod_uid: str
    confidence: str
    reason: str


@dataclass(frozen=True)
class Segment:
    cluster_id: str
    node: str
    start: int
    end: int
    pos: SourcePos


def python_segment_facts(inv: Inventory, book: OwnershipBook, cluster_id: str, node: str, start: int, end: int,
                         holders: Holders, pos: SourcePos) -> list[tuple[str, CapacityFact, Piece]]:
    """(device id, fact, piece) for every unit of the node's GPUs over the segment, in the
    order of the node's GPUs, then the devices held outside the inventory. ``segment_facts``
    is this in C where the C module is built (domain/_capacity_segment.c): it takes the
    exclusive GPUs over which nothing changes and hands every other GPU to ``_gpu_facts``."""
    seg = Segment(cluster_id, node, start, end, pos)
    out: list[tuple[str, CapacityFact, Piece]] = []
    known: set[str] = set()
    for gpu in inv.on_node(node):
        out += _gpu_facts(inv, book, seg, gpu, holders, known)
    return out + _outside_of(inv, book, seg, holders, known)


def _gpu_facts(inv: Inventory, book: OwnershipBook, seg: Segment, gpu: GpuEntry, holders: Holders,
               known: set[str]) -> list[tuple[str, CapacityFact, Piece]]:
    """The facts of one inventory GPU's units over the segment (none where the entry is not
    valid in it); adds the units' device ids to ``known``."""
    start, end = seg.start, seg.end
    if gpu.valid_from_ms >= end or (gpu.valid_to_ms is not None and gpu.valid_to_ms <= start):
        return []
    a0, b0 = max(start, gpu.valid_from_ms), min(end, gpu.valid_to_ms if gpu.valid_to_ms is not None else end)
    units, excess = units_of(inv, gpu)
    unavail = inv.unavailable_windows(gpu.gpu_uuid, a0, b0)
    out = []
    for unit in units:
        known.add(unit.device_id)
        holder = holders.get(unit.device_id) if unit.allocatable else None
        out += _unit_facts(book, seg, gpu, unit, a0, b0, holder, unavail)
    if excess > 0:
        reason = f"MIG instance weights sum to {1 + excess:.6f} GPU: over-allocated"
        out.append(make_fact(seg, gpu.gpu_uuid, gpu.gpu_uuid + "/over-allocation", gpu.gpu_class, "mig", "", excess,
                             a0, b0, "over_allocated", None, "", reason))
    return out


def _outside_of(inv: Inventory, book: OwnershipBook, seg: Segment, holders: Holders,
                known: set[str]) -> list[tuple[str, CapacityFact, Piece]]:
    """The facts of the devices held that no inventory GPU of the node has, by device id."""
    out = []
    for device in sorted(set(holders) - known):
        if device.startswith(("GPU-", "MIG-")):
            out += _outside_facts(inv, book, seg, device, holders[device])
    return out


def _outside_facts(inv: Inventory, book: OwnershipBook, seg: Segment, device: str,
                   holder) -> list[tuple[str, CapacityFact, Piece]]:
    """A device the kubelet assigned that the inventory does not approve at that time."""
    whole = device.startswith("GPU-") and "::" not in device
    entries = inv.entries(device.split("::")[0])
    gpu = entries[0] if entries else None
    unit = Unit(device, 1.0 if whole else 0.0, gpu.mode if gpu else ("exclusive" if whole else "unknown"), "",
                "unattributed")
    where = "outside its validity in" if gpu else "not in"
    reason = (f"GPU {device} on {seg.node} is {where} the approved inventory: publish inventory.json with it "
              "(gpuledger load inventory)")
    pod = book.pod_at(holder[0], holder[1], seg.start)
    owner = _owner(book, holder, pod, seg.start, "unattributed")[0]
    return [make_fact(seg, device.split("::")[0], device, gpu.gpu_class if gpu else "unknown", unit.mode, "",
                      unit.fraction, seg.start, seg.end, "outside_inventory", owner, "unattributed", reason)]


def _unit_facts(book: OwnershipBook, seg: Segment, gpu: GpuEntry | None, unit: Unit, a0: int, b0: int,
                holder, unavail: list[Unavailability], forced_reason: str = "") -> list[tuple[str, CapacityFact, Piece]]:
    pod = book.pod_at(holder[0], holder[1], seg.start) if holder else None
    cuts = None  # instants inside (a0, b0) where the facts change; none at all most of the time
    if unavail:
        cuts = {a0, b0}
        for u in unavail:
            cuts.update(t for t in (u.from_ms, u.to_ms) if a0 < t < b0)
    if pod is not None:
        changes = book.namespace_changes(pod.namespace, a0, b0)
        if pod.end_ms is not None and a0 < pod.end_ms < b0:
            changes = [*changes, pod.end_ms]
        if changes:
            cuts = cuts or {a0, b0}
            cuts.update(changes)
    bounds = sorted(cuts) if cuts is not None else (a0, b0)
    gpu_uuid = gpu.gpu_uuid if gpu else unit.device_id.split("::")[0]
    gpu_class = gpu.gpu_class if gpu else "unknown"
    out = []
    for a, b in zip(bounds, bounds[1:]):
        window = next((u for u in unavail if u.from_ms <= a < u.to_ms), None) if unavail else None
        if window is not None:
            out.append(make_fact(seg, gpu_uuid, unit.device_id, gpu_class, unit.mode, unit.profile, unit.fraction, a, b,
                             "unavailable", None, "", window.reason or "unavailable"))
        elif not unit.allocatable:
            out.append(make_fact(seg, gpu_uuid, unit.device_id, gpu_class, unit.mode, unit.profile, unit.fraction, a, b,
                             "unallocated", None, "", "MIG capacity in no instance (fragmentation)"))
        elif holder is None or (pod is not None and pod.end_ms is not None and pod.end_ms <= a):
            reason = "" if holder is None else "holding pod had ended"
            out.append(make_fact(seg, gpu_uuid, unit.device_id, gpu_class, unit.mode, unit.profile, unit.fraction, a, b,
                             "unallocated", None, "", reason))
        else:
            owner, confidence, reason = _owner(book, holder, pod, a, unit.confidence)
            out.append(make_fact(seg, gpu_uuid, unit.device_id, gpu_class, unit.mode, unit.profile, unit.fraction, a, b,
                             "allocated", owner, confidence if not forced_reason else "unattributed",
                             forced_reason or reason))
    return out


def _owner(book: OwnershipBook, holder, pod: PodLife | None, t_ms: int, confidence: str) -> tuple[dict, str, str]:
    owner = {"namespace": holder[0], "pod_name": holder[1], "container": holder[2]}
    if pod is None:
        return owner, "unattributed", f"no pod {holder[0]}/{holder[1]} known at the snapshot time"
    owner.update(pod_uid=pod.uid, endpoint_id=pod.endpoint_id)
    ns = book.namespace_at(pod.namespace, t_ms)
    if ns is None:
        return owner, "unattributed", f"namespace {pod.namespace} unknown at that time"
    owner["namespace_uid"] = ns.uid
    if not ns.tenant_id:
        return owner, "unattributed", f"namespace {pod.namespace} has no gpuledger.io/tenant label"
    owner.update(tenant_id=ns.tenant_id, project_id=ns.project_id, cost_center=ns.cost_center)
    return owner, confidence, ""


_NO_OWNER = {"tenant_id": "", "project_id": "", "cost_center": "", "namespace": "", "namespace_uid": "",
             "pod_name": "", "pod_uid": "", "container": "", "endpoint_id": "", "workload_kind": "pod"}


def python_make_fact(seg: Segment, gpu_uuid: str, device_id: str, gpu_class: str, mode: str, profile: str,
                     fraction: float, a: int, b: int, kind: str, owner: dict | None, confidence: str,
                     reason: str) -> tuple[str, CapacityFact, Piece]:
    """One capacity fact and its lookup piece; the id hashes the unit, the bounds, the kind and
    the holder's identity (pod and namespace UIDs, or VM and owner for a vGPU). ``make_fact``
    is this in C where the C module is built (domain/_capacity_fact.c)."""
    who = {**_NO_OWNER, **(owner or {})}
    fid = _capacity_id(seg.cluster_id, device_id, a, b, kind, who)
    fact = built(CapacityFact, {
        "fact_id": fid, "cluster_id": seg.cluster_id, "kind": kind, "gpu_uuid": gpu_uuid, "device_id": device_id,
        "node": seg.node, "gpu_class": gpu_class, "mode": mode, "profile": profile, "capacity_fraction": fraction,
        "valid_from_ms": a, "valid_to_ms": b, **who, "confidence": confidence, "reason": reason,
        "src_topic": seg.pos.topic, "src_partition": seg.pos.partition, "src_offset": seg.pos.offset})
    piece = Piece(a, b, fid, kind, who["tenant_id"], who["project_id"], who["namespace"], who["pod_name"],
                  who["pod_uid"], confidence, reason)
    return device_id, fact, piece


def python_same_pods(book: OwnershipBook, holders: Holders, a_ms: int, b_ms: int) -> bool:
    """Does every holder name the same pod at ``a_ms`` and at ``b_ms``? (A node segment's facts
    look its holders' pods up at the segment's start.) ``same_pods`` is this in C where the C
    module is built (domain/_capacity_segment.c)."""
    same = book.same_pod_at
    return all(same(h[0], h[1], a_ms, b_ms) for h in holders.values())


def _capacity_id(cluster_id: str, device_id: str, a: int, b: int, kind: str, who: dict) -> str:
    return fact_id("capacity", cluster_id, device_id, a, b, kind, who["pod_uid"], who["namespace_uid"],
                   *([who["tenant_id"]] if who["workload_kind"] == "vm" else []))


try:  # built at install (pyproject.toml); a source tree without the build makes them in Python
    from gpuledger.domain import _facts
except ImportError:  # pragma: no cover — tests/unit/domain/test_capacity_*_c.py require it
    make_fact, segment_facts, same_pods = python_make_fact, python_segment_facts, python_same_pods
else:
    _facts.capacity_setup(python_make_fact, CapacityFact, Piece, _NO_OWNER)
    _facts.segment_setup(python_segment_facts, Segment, _gpu_facts, _outside_of, python_same_pods)
    make_fact, segment_facts, same_pods = _facts.capacity_fact, _facts.segment_facts, _facts.same_pods


_BOUNDS = frozenset(("fact_id", "valid_from_ms", "valid_to_ms", "src_topic", "src_partition", "src_offset"))
# a fact's fields but its bounds and source record, as one tuple (facts carry every field)
_same = operator.itemgetter(*(f for f in CapacityFact.__dataclass_fields__ if f not in _BOUNDS))


def merge_runs(items: list[tuple[str, CapacityFact, Piece]]) -> list[tuple[str, CapacityFact, Piece]]:
    """``items`` of consecutive segments, in time order per unit: each unit's facts that touch
    (one ends where the next begins) and agree on everything but their bounds and source
    record become one fact over both, with the first one's source record; the id hashes the
    merged bounds (as ``make_fact``). Order: by each merged fact's first part."""
    out: list[list] = []  # [device, first fact, its piece, key, end of the run]
    last: dict[str, list] = {}
    for device, fact, piece in items:
        key = _same(fact.__dict__)
        run = last.get(device)
        if run is not None and run[4] == fact.valid_from_ms and run[3] == key:
            run[4] = fact.valid_to_ms
            continue
        entry = [device, fact, piece, key, fact.valid_to_ms]
        out.append(entry)
        last[device] = entry
    result = []
    for device, fact, piece, _, end in out:
        if end != fact.valid_to_ms:  # merged: name it by its bounds
            d = {**fact.__dict__, "valid_to_ms": end}
            fid = d["fact_id"] = _capacity_id(d["cluster_id"], d["device_id"], d["valid_from_ms"], end, d["kind"], d)
            fact = built(CapacityFact, d)
            piece = Piece(piece.start_ms, end, fid, piece.kind, piece.tenant_id, piece.project_id,
                          piece.namespace, piece.pod_name, piece.pod_uid, piece.confidence, piece.reason)
        result.append((device, fact, piece))
    return result


def run_facts(facts_of, start: int, end: int, holders: dict, parts: list) -> list:
    """The facts of consecutive segments taken as one, each with the source record of the
    segment it starts in (as ``merge_runs`` gives them when each segment is built apart)."""
    items = facts_of(start, end, holders, SourcePos(*parts[0][1]))
    if len(parts) == 1:
        return items
    starts = [a for a, _ in parts]
    out = []
    for device, fact, piece in items:
        pos = parts[bisect.bisect_right(starts, fact.valid_from_ms) - 1][1]
        if pos[2] != fact.src_offset or pos[1] != fact.src_partition or pos[0] != fact.src_topic:
            fact = built(CapacityFact, {**fact.__dict__, "src_topic": pos[0], "src_partition": pos[1],
                                        "src_offset": pos[2]})
        out.append((device, fact, piece))
    return out
