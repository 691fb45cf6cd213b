"""Ownership from the Kubernetes watch stream: a fold over Pod and Namespace events.

Pods are keyed by UID, namespaces by UID; names are labels resolved *as of* an instant.
Each namespace version is ``[from_ms, to_ms)`` with the tenant labels it carried then; a
label change closes one version and opens the next. Events may arrive out of order across
objects (different partitions), so every change is applied to the object's own versions.

``prune(before_ms)`` forgets what ended before ``before_ms`` (a worker passes its watch
watermark less its late-data horizon), so the book holds what is live plus the horizon, not
every pod ever seen. A forgotten pod or namespace must not come back when an event for it
arrives later: the producer sends lines again after a restart (at least once), a relist
re-sends terminal pods, and a terminal pod is DELETED when it is garbage-collected, hours
after its end. The book therefore ignores an event for an object it does not know when the
object was created before the prune point and not before the first event the book saw
(``origin_ms``): such an object is either one it forgot or one whose events came later than
the horizon allows. Objects created before ``origin_ms`` (those listed when the book
started) are remembered by UID instead once forgotten (``pod_tombstones`` and
``namespace_tombstones``: a set bounded by what existed when the book started).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

from gpuledger.domain import pod_spec
from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["LABEL_COST_CENTER", "LABEL_ENDPOINT", "LABEL_PROJECT", "LABEL_TENANT", "NamespaceVersion",
           "OwnershipBook", "PodLife", "WatchError"]

LABEL_TENANT = "gpuledger.io/tenant"
LABEL_PROJECT = "gpuledger.io/project"
LABEL_COST_CENTER = "gpuledger.io/cost-center"
LABEL_ENDPOINT = "gpuledger.io/endpoint"
OPEN = None
_TERMINAL_PHASES = {"Succeeded", "Failed"}
_VERSIONS = count(1)  # book versions, unique across books: a new book never repeats an old one's


class WatchError(ValueError):
    """A watch event that cannot be applied; the message says why."""


@dataclass
class NamespaceVersion:
    uid: str
    name: str
    from_ms: int
    to_ms: int | None
    tenant_id: str
    project_id: str
    cost_center: str

    def covers(self, t_ms: int) -> bool:
        return self.from_ms <= t_ms and (self.to_ms is None or t_ms < self.to_ms)


@dataclass
class PodLife:
    uid: str
    namespace: str
    name: str
    node: str
    start_ms: int
    end_ms: int | None = None
    endpoint_id: str = ""
    running_ms: int | None = None  # started running (containers' startedAt, else first seen Running): its wait's end
    mig_requests: dict[str, int] = field(default_factory=dict)  # MIG profile -> instances requested
    gpus: int = 0  # whole GPUs requested (nvidia.com/gpu)
    disruption: str = ""  # "preempted" or "evicted": why the cluster ended it (pod_spec.disruption)
    end_phase: str = ""  # the phase it ended in: Succeeded, Failed, or "" (deleted while pending or running)
    scheduled_ms: int | None = None  # bound to a node: PodScheduled's time, else first seen with spec.nodeName
    priority_class: str = ""  # spec.priorityClassName
    priority: int | None = None  # spec.priority

    def covers(self, t_ms: int) -> bool:
        return self.start_ms <= t_ms and (self.end_ms is None or t_ms < self.end_ms)


@dataclass
class OwnershipBook:
    """Time-valid Pod and Namespace identity, folded from watch events."""

    namespaces: dict[str, list[NamespaceVersion]] = field(default_factory=dict)  # by name
    pods: dict[str, PodLife] = field(default_factory=dict)  # by uid
    pods_by_name: dict[str, list[str]] = field(default_factory=dict)  # "ns/name" -> uids
    origin_ms: int | None = None  # earliest observed_at of the Pod/Namespace events folded
    pruned_before_ms: int | None = None  # the latest prune point: what ended before it is forgotten
    pod_tombstones: set[str] = field(default_factory=set)  # forgotten pods created before origin_ms
    namespace_tombstones: set[str] = field(default_factory=set)  # likewise, namespace UIDs
    # changes with every Pod or Namespace event folded and every prune (not with a bookmark):
    # a reader that asked the book something may ask again only when it changed
    version: int = field(default_factory=lambda: next(_VERSIONS), compare=False, repr=False)
    pods_dropped: int = field(default=0, compare=False, repr=False)  # by prune, ever (the only way a pod leaves)

    # -- the fold ------------------------------------------------------------
    def apply(self, event_type: str, obj: dict, observed_at_ms: int) -> str:
        """Apply one watch event; returns what it was ("pod", "namespace", "bookmark", ...)."""
        if event_type == "BOOKMARK":
            return "bookmark"
        if event_type == "ERROR":
            return "error"  # e.g. 410 Expired: the producer relists; nothing to fold
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            raise WatchError(f"unknown watch event type {event_type!r}")
        _check_shape(obj)  # before any state changes: a bad shape raises here, never half-way or later
        self.version = next(_VERSIONS)
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        uid, name = meta.get("uid"), meta.get("name")
        if not uid or not name:
            raise WatchError(f"{kind or 'object'} without metadata.uid/name")
        if kind == "Namespace":
            self._apply_namespace(event_type, uid, name, meta, observed_at_ms)
            self._seen(observed_at_ms)
            return "namespace"
        if kind == "Pod":
            self._apply_pod(event_type, uid, name, meta, obj, observed_at_ms)
            self._seen(observed_at_ms)
            return "pod"
        raise WatchError(f"unsupported kind {kind!r} (expected Pod or Namespace)")

    def _seen(self, t_ms: int) -> None:
        self.origin_ms = t_ms if self.origin_ms is None else min(self.origin_ms, t_ms)

    def _forgotten(self, uid: str, tombstones: set[str], created_ms: int) -> bool:
        """Is an object the book does not know one that ``prune`` forgot (see the module doc)?"""
        if uid in tombstones:
            return True
        return (self.pruned_before_ms is not None and self.origin_ms is not None
                and self.origin_ms <= created_ms < self.pruned_before_ms)

    def _apply_namespace(self, event_type: str, uid: str, name: str, meta: dict, t_ms: int) -> None:
        versions = self.namespaces.setdefault(name, [])
        mine = [v for v in versions if v.uid == uid]
        last = max(mine, key=lambda v: v.from_ms) if mine else None
        if last is None and self._forgotten(uid, self.namespace_tombstones, _created_ms(meta, t_ms)):
            if not versions:
                del self.namespaces[name]
            return
        if event_type == "DELETED":
            if last is not None and (last.to_ms is None or last.to_ms > t_ms):
                last.to_ms = max(t_ms, last.from_ms)
            return
        labels = meta.get("labels") or {}
        owner = (labels.get(LABEL_TENANT, ""), labels.get(LABEL_PROJECT, ""), labels.get(LABEL_COST_CENTER, ""))
        if last is not None:
            if (last.tenant_id, last.project_id, last.cost_center) == owner or t_ms < last.from_ms:
                return
            if last.to_ms is not None and last.to_ms <= t_ms:
                return  # the namespace was deleted before this change: stale event
            last.to_ms = t_ms
            start = t_ms
        else:
            start = _created_ms(meta, t_ms)
        versions.append(NamespaceVersion(uid, name, start, OPEN, *owner))
        versions.sort(key=lambda v: v.from_ms)

    def _apply_pod(self, event_type: str, uid: str, name: str, meta: dict, obj: dict, t_ms: int) -> None:
        namespace = meta.get("namespace") or ""
        life = self.pods.get(uid)
        if life is None and self._forgotten(uid, self.pod_tombstones, _created_ms(meta, t_ms)):
            return
        if life is None:
            labels = meta.get("labels") or {}
            life = PodLife(uid, namespace, name, (obj.get("spec") or {}).get("nodeName") or "",
                           _created_ms(meta, t_ms), None, labels.get(LABEL_ENDPOINT, ""), None,
                           pod_spec.mig_requests(obj), pod_spec.whole_gpus(obj),
                           priority_class=pod_spec.priority_class(obj), priority=pod_spec.priority(obj))
            self.pods[uid] = life
            self.pods_by_name.setdefault(f"{namespace}/{name}", []).append(uid)
        if not life.node:
            life.node = (obj.get("spec") or {}).get("nodeName") or ""
        disrupted = pod_spec.disruption(obj)
        if disrupted and (life.end_ms is None or t_ms <= life.end_ms):
            life.disruption = disrupted
        phase = (obj.get("status") or {}).get("phase")
        _note_progress(life, obj, phase, t_ms)
        if event_type == "DELETED" or phase in _TERMINAL_PHASES:
            if life.end_ms is None or t_ms < life.end_ms:
                life.end_ms = max(t_ms, life.start_ms)
                life.end_phase = phase if phase in _TERMINAL_PHASES else ""

    # -- as-of lookups -------------------------------------------------------
    def pod_at(self, namespace: str, name: str, t_ms: int) -> PodLife | None:
        """The pod that bore ``namespace/name`` at ``t_ms`` (latest start wins)."""
        best = None
        for uid in self.pods_by_name.get(f"{namespace}/{name}", ()):
            life = self.pods[uid]
            if life.covers(t_ms) and (best is None or life.start_ms > best.start_ms):
                best = life
        return best

    def same_pod_at(self, namespace: str, name: str, a_ms: int, b_ms: int) -> bool:
        """Does ``namespace/name`` name the same pod (or none) at ``a_ms`` and at ``b_ms``?
        ``pod_at`` twice, answered without the lookups for a name only one pod ever bore."""
        uids = self.pods_by_name.get(f"{namespace}/{name}", ())
        if len(uids) == 1:
            life = self.pods[uids[0]]
            return life.covers(a_ms) == life.covers(b_ms)
        at_a, at_b = self.pod_at(namespace, name, a_ms), self.pod_at(namespace, name, b_ms)
        return at_a is at_b or at_a == at_b

    def namespace_at(self, name: str, t_ms: int) -> NamespaceVersion | None:
        best = None
        for v in self.namespaces.get(name, ()):
            if v.covers(t_ms) and (best is None or v.from_ms > best.from_ms):
                best = v
        return best

    def namespace_changes(self, name: str, from_ms: int, to_ms: int) -> list[int]:
        """Instants inside ``(from_ms, to_ms)`` where the namespace's version changes."""
        cuts = set()
        for v in self.namespaces.get(name, ()):
            for edge in (v.from_ms, v.to_ms):
                if edge is not None and from_ms < edge < to_ms:
                    cuts.add(edge)
        return sorted(cuts)

    # -- pruning -------------------------------------------------------------
    def prune(self, before_ms: int) -> int:
        """Forget what ended before ``before_ms``; returns how many pods and namespace
        versions were dropped.

        Dropped: pods whose life ended (DELETED or a terminal phase, ``end_ms``) before
        ``before_ms``, with their ``pods_by_name`` entries; namespace versions that ended
        before it, except the version a kept pod started under and the latest version of a
        namespace UID any of whose versions is kept (an open version, a namespace that still
        exists, is never dropped). Unchanged, for every ``t >= before_ms``: ``pod_at(ns, name,
        t)``, ``namespace_at(name, t)`` and ``namespace_changes(name, from_ms, to_ms)`` with
        ``from_ms >= before_ms``; and ``namespace_at(p.namespace, p.start_ms)`` for every pod
        ``p`` kept (what ``closed_demand`` asks). Events folded afterwards change the book as
        they would have without pruning, as far as those lookups show, provided they respect
        the horizon (the module doc says which are ignored). Lookups before ``before_ms`` may
        answer differently: pass a point no fact still to be made looks up before."""
        self.pruned_before_ms = before_ms if self.pruned_before_ms is None else max(self.pruned_before_ms, before_ms)
        self.version = next(_VERSIONS)
        origin = self.origin_ms
        dropped = 0
        for uid in [u for u, p in self.pods.items() if p.end_ms is not None and p.end_ms < before_ms]:
            life = self.pods.pop(uid)
            key = f"{life.namespace}/{life.name}"
            rest = [u for u in self.pods_by_name.get(key, ()) if u != uid]
            if rest:
                self.pods_by_name[key] = rest
            else:
                self.pods_by_name.pop(key, None)
            if origin is None or life.start_ms < origin:
                self.pod_tombstones.add(uid)
            dropped += 1
            self.pods_dropped += 1
        pinned = set()  # the versions kept pods started under (by identity)
        for life in self.pods.values():
            v = self.namespace_at(life.namespace, life.start_ms)
            if v is not None:
                pinned.add(id(v))
        for name in list(self.namespaces):
            versions = self.namespaces[name]
            keep = [v for v in versions if v.to_ms is None or v.to_ms >= before_ms or id(v) in pinned]
            uids = {v.uid for v in keep}
            for uid in uids:  # the fold reads a UID's latest version: it stays while any of that UID does
                latest = max((v for v in versions if v.uid == uid), key=lambda v: v.from_ms)
                if all(v is not latest for v in keep):
                    keep.append(latest)
            kept = {id(v) for v in keep}
            for v in versions:
                if id(v) not in kept and (origin is None or v.from_ms < origin):
                    self.namespace_tombstones.add(v.uid)
            dropped += len(versions) - len(keep)
            if keep:
                self.namespaces[name] = [v for v in versions if id(v) in kept]  # in their order
            else:
                del self.namespaces[name]
        return dropped

    # -- state ---------------------------------------------------------------
    def to_state(self) -> dict:
        state = {
            "namespaces": [[v.uid, v.name, v.from_ms, v.to_ms, v.tenant_id, v.project_id, v.cost_center]
                           for vs in self.namespaces.values() for v in vs],
            "pods": [[p.uid, p.namespace, p.name, p.node, p.start_ms, p.end_ms, p.endpoint_id, p.running_ms,
                      p.mig_requests, p.gpus, p.disruption, p.end_phase, p.scheduled_ms, p.priority_class,
                      p.priority] for p in self.pods.values()],
        }
        if self.origin_ms is not None:
            state["origin_ms"] = self.origin_ms
        if self.pruned_before_ms is not None:
            state["pruned_before_ms"] = self.pruned_before_ms
        if self.pod_tombstones:
            state["pod_tombstones"] = sorted(self.pod_tombstones)
        if self.namespace_tombstones:
            state["namespace_tombstones"] = sorted(self.namespace_tombstones)
        return state

    @classmethod
    def from_state(cls, state: dict) -> OwnershipBook:
        book = cls()
        for row in state.get("namespaces", []):
            v = NamespaceVersion(*row)
            book.namespaces.setdefault(v.name, []).append(v)
        for vs in book.namespaces.values():
            vs.sort(key=lambda v: v.from_ms)
        for row in state.get("pods", []):
            p = PodLife(*row)
            book.pods[p.uid] = p
            book.pods_by_name.setdefault(f"{p.namespace}/{p.name}", []).append(p.uid)
        book.origin_ms = state.get("origin_ms")
        book.pruned_before_ms = state.get("pruned_before_ms")
        book.pod_tombstones = set(state.get("pod_tombstones", ()))
        book.namespace_tombstones = set(state.get("namespace_tombstones", ()))
        return book


def _expect(value, types: type | tuple, what: str) -> None:
    if value is not None and not isinstance(value, types):
        raise WatchError(f"{what} is a {type(value).__name__}, expected {getattr(types, '__name__', 'object')}"
                         " (fix the producer that wrote this watch event)")


def _check_shape(obj) -> None:
    """Raise ``WatchError`` unless every field the fold reads, now or when facts are made
    later, has the type the Kubernetes API gives it: objects are JSON objects, names and
    label values strings. Checked before the fold changes anything, so a bad event is
    refused whole and cannot fail later in attribution or in the store."""
    if not isinstance(obj, dict):
        raise WatchError(f"watch object is a {type(obj).__name__}, expected a JSON object")
    meta = obj.get("metadata")
    _expect(obj.get("kind"), str, "kind")
    _expect(meta, dict, "metadata")
    meta = meta or {}
    for key in ("uid", "name", "namespace", "creationTimestamp"):
        _expect(meta.get(key), str, f"metadata.{key}")
    labels = meta.get("labels")
    _expect(labels, dict, "metadata.labels")
    for key, value in (labels or {}).items():
        _expect(value, str, f"metadata.labels[{key!r}]")
    spec, status = obj.get("spec"), obj.get("status")
    _expect(spec, dict, "spec")
    _expect(status, dict, "status")
    _expect((status or {}).get("phase"), str, "status.phase")
    _expect((spec or {}).get("nodeName"), str, "spec.nodeName")
    containers = (spec or {}).get("containers")
    _expect(containers, list, "spec.containers")
    for i, c in enumerate(containers or []):
        _expect(c, dict, f"spec.containers[{i}]")
        res = (c or {}).get("resources")
        _expect(res, dict, f"spec.containers[{i}].resources")
        for part in ("limits", "requests"):
            _expect((res or {}).get(part), dict, f"spec.containers[{i}].resources.{part}")


def _note_progress(life: PodLife, obj: dict, phase, t_ms: int) -> None:
    """When the pod was bound and started running, the earliest any event says. The API's own
    times (PodScheduled, containers' startedAt) are taken when present, never before the pod's
    creation nor after the event that shows them; else the event's time. Priority is set at
    creation and never changes: the first event that says it counts."""
    said = pod_spec.scheduled_at_ms(obj)
    if said is not None or (obj.get("spec") or {}).get("nodeName") or phase == "Running":
        bound = t_ms if said is None else max(life.start_ms, min(said, t_ms))
        if life.scheduled_ms is None or bound < life.scheduled_ms:
            life.scheduled_ms = bound
    said = pod_spec.started_at_ms(obj)
    if phase == "Running" or (said is not None and phase in _TERMINAL_PHASES):  # a short job seen only at its end ran too
        running = t_ms if said is None else max(life.start_ms, min(said, t_ms))
        if life.running_ms is None or running < life.running_ms:
            life.running_ms = running
    if life.priority is None:
        life.priority = pod_spec.priority(obj)
    if not life.priority_class:
        life.priority_class = pod_spec.priority_class(obj)


def _created_ms(meta: dict, observed_at_ms: int) -> int:
    created = meta.get("creationTimestamp")
    if isinstance(created, str):
        try:
            return min(parse_rfc3339_ms(created), observed_at_ms)
        except ValueError:
            pass
    return observed_at_ms
