"""GPU demand from the watch stream, as facts of two outcomes:

- waiting demand: a pod that asked for whole GPUs (``nvidia.com/gpu``, profile ``""``) or MIG
  profiles (``nvidia.com/mig-<profile>``, one fact per profile) and waited ``[created,
  running or ended)`` (outcome ``scheduled`` or ``ended without running``). Each wait also
  says when the scheduler bound the pod (``scheduled_ms``: the wait splits into scheduling
  delay, created -> bound, and startup delay, bound -> running), the node, and the pod's
  priority class and priority. Set against free MIG capacity, a MIG wait shows capacity that
  could not host the profile asked for (fragmentation);
- how a GPU pod's life ended: every pod that asked for GPUs (whole or MIG), over its life
  ``[created, ended)``, with outcome ``completed`` (phase Succeeded: a finished job),
  ``failed``, ``deleted`` (while pending or running), or — when the cluster ended it —
  ``preempted`` or ``evicted``; profile ``""`` for whole GPUs. Its held capacity is in the
  capacity facts (by ``pod_uid``): the showback counts the GPU-hours, guaranteed and
  borrowed, the cluster took back, and the cost per completed job.

- a wait still open: outcome ``pending``, ``[created, created)`` (the end is not known yet),
  made once the watch stream has passed the pod's creation while it is still waiting, so a
  pod pending now is seen before its wait ends. Its wait's fact replaces it in what readers
  count (the queries pair them by pod and profile); it has its own id, and every wait has one
  (a wait whose end the stream passed in the same step gets it with its wait), so which facts
  exist does not depend on how far the watermark moved at a time.

A fact is made once its interval has ended and the watch stream has passed its end. A wait
of no length (a pod first seen running at its creation) is no fact, and has no pending fact.

``done`` holds the pods whose wait is already a fact. ``prune_done`` keeps it to the pods
still in the book: run it after ``OwnershipBook.prune``. A pod the book forgot is never
folded again (the book ignores its late events), so it cannot come back to be emitted; a
pod still in the book stays in ``done``. Prune the book only up to a watermark
``closed_demand`` has already run with, so every pod it forgets had its wait emitted."""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.facts import fact_id
from gpuledger.domain.k8s import OwnershipBook, PodLife

__all__ = ["ENDED", "PENDING", "DemandFact", "closed_demand", "prune_done"]

ENDED = "ended"  # the done-key suffix and fact-id part of a pod's end
PENDING = "pending"  # the outcome, done-key suffix and fact-id part of a wait still open
_END_OUTCOMES = {"Succeeded": "completed", "Failed": "failed"}


@dataclass(frozen=True)
class DemandFact:
    fact_id: str
    cluster_id: str
    tenant_id: str
    namespace: str
    pod_name: str
    pod_uid: str
    profile: str
    instances: int
    waited_from_ms: int
    waited_to_ms: int
    outcome: str  # waits: scheduled, ended without running (pending while open); ends: completed, failed, deleted,
    # preempted, evicted
    node: str = ""  # the node it was bound to ("" if never)
    scheduled_ms: int | None = None  # bound (PodScheduled), within [waited_from_ms, waited_to_ms]; None if not
    running_ms: int | None = None  # started running, within the interval; None if not
    priority_class: str = ""
    priority: int | None = None


def _progress(pod: PodLife, until_ms: int) -> dict:
    """The bind and start of ``pod`` as of ``until_ms`` (the end of the fact's interval)."""
    running = pod.running_ms if pod.running_ms is not None and pod.running_ms <= until_ms else None
    bound = pod.scheduled_ms if pod.scheduled_ms is not None and pod.scheduled_ms <= until_ms else None
    if bound is not None and running is not None:
        bound = min(bound, running)  # clocks of the scheduler and the kubelet disagree: bound before running
    return {"node": pod.node, "scheduled_ms": bound, "running_ms": running, "priority_class": pod.priority_class,
            "priority": pod.priority}


def closed_demand(book: OwnershipBook, cluster_id: str, k8s_watermark_ms: int, done: set[str]) -> list[DemandFact]:
    out = []
    for pod in book.pods.values():
        if not (pod.gpus or pod.mig_requests):
            continue
        if pod.uid in done and (pod.end_ms is None or pod.end_ms > k8s_watermark_ms or f"{pod.uid}/{ENDED}" in done):
            continue  # its wait is a fact, and its end is not closed or a fact too: nothing new (most pods, most passes)
        asks = ([("", pod.gpus)] if pod.gpus else []) + sorted(pod.mig_requests.items())
        if f"{pod.uid}/{ENDED}" not in done and pod.end_ms is not None and pod.end_ms <= k8s_watermark_ms:
            done.add(f"{pod.uid}/{ENDED}")
            ns = book.namespace_at(pod.namespace, pod.start_ms)
            profile, n = asks[0]
            outcome = pod.disruption or _END_OUTCOMES.get(pod.end_phase, "deleted")
            out.append(DemandFact(fact_id("demand", cluster_id, pod.uid, ENDED), cluster_id,
                                  ns.tenant_id if ns else "", pod.namespace, pod.name, pod.uid, profile, n,
                                  pod.start_ms, pod.end_ms, outcome, **_progress(pod, pod.end_ms)))
        if pod.uid in done:
            continue
        ends = [t for t in (pod.running_ms, pod.end_ms) if t is not None]
        closed = bool(ends) and min(ends) <= k8s_watermark_ms
        if (f"{pod.uid}/{PENDING}" not in done and pod.start_ms <= k8s_watermark_ms
                and (not ends or min(ends) > pod.start_ms)):
            done.add(f"{pod.uid}/{PENDING}")
            out += _pending(book, cluster_id, pod, asks)
        if not closed:
            continue
        until = min(ends)
        ns = book.namespace_at(pod.namespace, pod.start_ms)
        outcome = "scheduled" if pod.running_ms is not None and pod.running_ms == until else "ended without running"
        done.add(pod.uid)
        progress = _progress(pod, until)
        for profile, n in asks:
            if until > pod.start_ms:
                out.append(DemandFact(fact_id("demand", cluster_id, pod.uid, profile), cluster_id,
                                      ns.tenant_id if ns else "", pod.namespace, pod.name, pod.uid, profile, n,
                                      pod.start_ms, until, outcome, **progress))
    return out


def _pending(book: OwnershipBook, cluster_id: str, pod: PodLife, asks: list[tuple[str, int]]) -> list[DemandFact]:
    """A wait's open facts, one per ask: what only the pod's creation says (not where or when
    it was bound, which a later step may know and an earlier one not)."""
    ns = book.namespace_at(pod.namespace, pod.start_ms)
    return [DemandFact(fact_id("demand", cluster_id, pod.uid, profile, PENDING), cluster_id, ns.tenant_id if ns else "",
                       pod.namespace, pod.name, pod.uid, profile, n, pod.start_ms, pod.start_ms, PENDING,
                       priority_class=pod.priority_class, priority=pod.priority) for profile, n in asks]


def prune_done(done: set[str], book: OwnershipBook) -> int:
    """Drop from ``done`` (in place) the pods no longer in ``book``; returns how many."""
    gone = [key for key in done if key.split("/", 1)[0] not in book.pods]
    done.difference_update(gone)
    return len(gone)
