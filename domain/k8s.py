"""Ownership from the Kubernetes watch stream: a fold over Pod and Namespace events.

Pods are keyed by UID, namespaces by UID; names are labels resolved *as of* an instant.
Each namespace version is ``[from_ms, to_ms)`` with the tenant labels it carried then; a
label change closes one version and opens the next. Events may arrive out of order across
objects (different partitions), so every change is applied to the object's own versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["LABEL_COST_CENTER", "LABEL_ENDPOINT", "LABEL_PROJECT", "LABEL_TENANT", "NamespaceVersion",
           "OwnershipBook", "PodLife", "WatchError"]

LABEL_TENANT = "gpuledger.io/tenant"
LABEL_PROJECT = "gpuledger.io/project"
LABEL_COST_CENTER = "gpuledger.io/cost-center"
LABEL_ENDPOINT = "gpuledger.io/endpoint"
OPEN = None
_TERMINAL_PHASES = {"Succeeded", "Failed"}


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
    running_ms: int | None = None  # first seen Running: the end of its wait for resources
    mig_requests: dict[str, int] = field(default_factory=dict)  # MIG profile -> instances requested

    def covers(self, t_ms: int) -> bool:
        return self.start_ms <= t_ms and (self.end_ms is None or t_ms < self.end_ms)


@dataclass
class OwnershipBook:
    """Time-valid Pod and Namespace identity, folded from watch events."""

    namespaces: dict[str, list[NamespaceVersion]] = field(default_factory=dict)  # by name
    pods: dict[str, PodLife] = field(default_factory=dict)  # by uid
    pods_by_name: dict[str, list[str]] = field(default_factory=dict)  # "ns/name" -> uids

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
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        uid, name = meta.get("uid"), meta.get("name")
        if not uid or not name:
            raise WatchError(f"{kind or 'object'} without metadata.uid/name")
        if kind == "Namespace":
            self._apply_namespace(event_type, uid, name, meta, observed_at_ms)
            return "namespace"
        if kind == "Pod":
            self._apply_pod(event_type, uid, name, meta, obj, observed_at_ms)
            return "pod"
        raise WatchError(f"unsupported kind {kind!r} (expected Pod or Namespace)")

    def _apply_namespace(self, event_type: str, uid: str, name: str, meta: dict, t_ms: int) -> None:
        versions = self.namespaces.setdefault(name, [])
        mine = [v for v in versions if v.uid == uid]
        last = max(mine, key=lambda v: v.from_ms) if mine else None
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
        if life is None:
            labels = meta.get("labels") or {}
            life = PodLife(uid, namespace, name, (obj.get("spec") or {}).get("nodeName") or "",
                           _created_ms(meta, t_ms), None, labels.get(LABEL_ENDPOINT, ""), None, _mig_requests(obj))
            self.pods[uid] = life
            self.pods_by_name.setdefault(f"{namespace}/{name}", []).append(uid)
        if not life.node:
            life.node = (obj.get("spec") or {}).get("nodeName") or ""
        phase = (obj.get("status") or {}).get("phase")
        if phase == "Running" and (life.running_ms is None or t_ms < life.running_ms):
            life.running_ms = t_ms
        if event_type == "DELETED" or phase in _TERMINAL_PHASES:
            if life.end_ms is None or t_ms < life.end_ms:
                life.end_ms = max(t_ms, life.start_ms)

    # -- as-of lookups -------------------------------------------------------
    def pod_at(self, namespace: str, name: str, t_ms: int) -> PodLife | None:
        """The pod that bore ``namespace/name`` at ``t_ms`` (latest start wins)."""
        best = None
        for uid in self.pods_by_name.get(f"{namespace}/{name}", ()):
            life = self.pods[uid]
            if life.covers(t_ms) and (best is None or life.start_ms > best.start_ms):
                best = life
        return best

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

    # -- state ---------------------------------------------------------------
    def to_state(self) -> dict:
        return {
            "namespaces": [[v.uid, v.name, v.from_ms, v.to_ms, v.tenant_id, v.project_id, v.cost_center]
                           for vs in self.namespaces.values() for v in vs],
            "pods": [[p.uid, p.namespace, p.name, p.node, p.start_ms, p.end_ms, p.endpoint_id, p.running_ms,
                      p.mig_requests] for p in self.pods.values()],
        }

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


def _mig_requests(pod: dict) -> dict[str, int]:
    """MIG instances a pod asks for: ``nvidia.com/mig-<profile>`` requests (or limits)."""
    out: dict[str, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for key, value in asked.items():
            if key.startswith("nvidia.com/mig-"):
                try:
                    out[key.removeprefix("nvidia.com/mig-")] = out.get(key.removeprefix("nvidia.com/mig-"), 0) + int(value)
                except (TypeError, ValueError):
                    continue
    return out


def _created_ms(meta: dict, observed_at_ms: int) -> int:
    created = meta.get("creationTimestamp")
    if isinstance(created, str):
        try:
            return min(parse_rfc3339_ms(created), observed_at_ms)
        except ValueError:
            pass
    return observed_at_ms
