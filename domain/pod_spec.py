"""What a Pod object says, read as the Kubernetes API writes it (pure): the GPUs it asks for,
why the cluster ended it, when the scheduler bound it, when its containers started, and its
priority.

Readers are lenient where the fold's shape check (domain/k8s.py ``_check_shape``) is not: a
condition or container status of an odd shape, or a timestamp that does not parse, is not
evidence and is skipped, so nothing here raises. Times are epoch milliseconds (UTC).
"""

from __future__ import annotations

from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["INT32", "disruption", "mig_requests", "priority", "priority_class", "scheduled_at_ms", "started_at_ms",
           "whole_gpus"]

INT32 = (-(2 ** 31), 2 ** 31 - 1)  # spec.priority is an int32


def mig_requests(pod: dict) -> dict[str, int]:
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


def whole_gpus(pod: dict) -> int:
    """Whole GPUs a pod asks for: ``nvidia.com/gpu`` requests (or limits)."""
    n = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        try:
            n += int({**(res.get("limits") or {}), **(res.get("requests") or {})}.get("nvidia.com/gpu", 0))
        except (TypeError, ValueError):
            continue
    return n


# Why the cluster ended a pod, as the API says it: the DisruptionTarget condition's reason
# (Kubernetes 1.26+; PreemptionByKubeScheduler before 1.27), or the kubelet's status.reason.
_DISRUPTION_REASONS = {"PreemptionByScheduler": "preempted", "PreemptionByKubeScheduler": "preempted",
                       "EvictionByEvictionAPI": "evicted", "DeletionByTaintManager": "evicted",
                       "DeletionByPodGC": "evicted", "TerminationByKubelet": "evicted"}
_STATUS_REASONS = {"Evicted": "evicted", "Preempting": "preempted"}


def _conditions(pod: dict) -> list[dict]:
    conditions = (pod.get("status") or {}).get("conditions")
    return [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []


def disruption(pod: dict) -> str:
    """"preempted", "evicted" or "" from a pod object's status."""
    status = pod.get("status") or {}
    for cond in _conditions(pod):
        if (cond.get("type") == "DisruptionTarget" and cond.get("status") == "True"
                and cond.get("reason") in _DISRUPTION_REASONS):
            return _DISRUPTION_REASONS[cond["reason"]]
    reason = status.get("reason")
    return _STATUS_REASONS.get(reason, "") if isinstance(reason, str) else ""


def _time_ms(value) -> int | None:
    try:
        return parse_rfc3339_ms(value) if isinstance(value, str) else None
    except ValueError:
        return None


def scheduled_at_ms(pod: dict) -> int | None:
    """When the scheduler bound the pod to a node: the ``PodScheduled`` condition's
    ``lastTransitionTime`` once its status is ``True`` (the scheduler sets it when it binds;
    ``False`` with reason ``Unschedulable`` while it cannot place the pod). None without it."""
    for cond in _conditions(pod):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return _time_ms(cond.get("lastTransitionTime"))
    return None


def started_at_ms(pod: dict) -> int | None:
    """When the pod started running: the earliest ``startedAt`` of its (non-init) containers,
    running now or terminated since (``state`` and ``lastState``). None when no container says."""
    statuses = (pod.get("status") or {}).get("containerStatuses")
    found = []
    for cs in statuses if isinstance(statuses, list) else ():
        if not isinstance(cs, dict):
            continue
        for part in ("state", "lastState"):
            state = cs.get(part)
            for key in ("running", "terminated"):
                detail = state.get(key) if isinstance(state, dict) else None
                t = _time_ms(detail.get("startedAt")) if isinstance(detail, dict) else None
                if t is not None:
                    found.append(t)
    return min(found) if found else None


def priority_class(pod: dict) -> str:
    """``spec.priorityClassName`` ("" when the pod names none: the cluster's default applies)."""
    name = (pod.get("spec") or {}).get("priorityClassName")
    return name if isinstance(name, str) else ""


def priority(pod: dict) -> int | None:
    """``spec.priority``: the integer admission resolved from the priority class (None when absent)."""
    value = (pod.get("spec") or {}).get("priority")
    return value if type(value) is int and INT32[0] <= value <= INT32[1] else None
