"""Scheduler delays from the watch stream: every GPU pod's wait (whole GPUs and MIG profiles) is a
demand fact that says when the scheduler bound the pod (PodScheduled) and when it started
running (its containers' startedAt), as the API server writes them, with its priority; the
producer's lag in observing them does not count."""

import copy
import json
from pathlib import Path

from gpuledger.demo.builder import namespace_object, pod_object
from gpuledger.domain.demand import PENDING, closed_demand
from gpuledger.domain.k8s import OwnershipBook
from gpuledger.domain.timeutil import parse_rfc3339_ms

T0 = 1_788_000_000_000
S, M, H = 1_000, 60_000, 3_600_000
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"


def _book() -> OwnershipBook:
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("team-a", "ns-a", T0 - H, "alpha"), T0 - H)
    book.apply("ADDED", namespace_object("team-b", "ns-b", T0 - H, "beta"), T0 - H)
    return book


def _lifecycle(book: OwnershipBook, ns: str, uid: str, created: int, bound: int | None, started: int | None,
               end: int | None = None, gpus: int = 2, mig: str = "", lag: int = 2 * S, **kw) -> None:
    """Created unschedulable, bound at ``bound``, running from ``started``; every event observed
    ``lag`` after the API's time."""
    name = f"job-{uid}"
    book.apply("ADDED", pod_object(ns, name, uid, "", created, gpus, "Pending", mig_profile=mig, unschedulable=True,
                                   **kw), created + lag)
    if bound is not None:
        book.apply("MODIFIED", pod_object(ns, name, uid, "node-1", created, gpus, "Pending", mig_profile=mig,
                                          scheduled_ms=bound, **kw), bound + lag)
    if started is not None:
        book.apply("MODIFIED", pod_object(ns, name, uid, "node-1", created, gpus, "Running", mig_profile=mig,
                                          scheduled_ms=bound, started_ms=started, **kw), started + lag)
    if end is not None:
        node = "node-1" if bound is not None else ""
        book.apply("DELETED", pod_object(ns, name, uid, node, created, gpus, "Pending" if started is None else "Running",
                                         mig_profile=mig, scheduled_ms=bound, started_ms=started, **kw), end)


def _waits(book: OwnershipBook, watermark: int) -> dict:
    return {f.pod_uid: f for f in closed_demand(book, "c1", watermark, set())
            if f.outcome in ("scheduled", "ended without running")}


def test_whole_gpu_waits_split_into_scheduling_and_startup_delay_per_tenant():
    book = _book()
    _lifecycle(book, "team-a", "a1", T0, T0 + 7 * M, T0 + 9 * M, priority_class="batch-low", priority=100)
    _lifecycle(book, "team-a", "a2", T0 + 10 * M, T0 + 10 * M + 30 * S, T0 + 12 * M)
    _lifecycle(book, "team-b", "b1", T0 + 5 * M, T0 + 25 * M, T0 + 25 * M + 45 * S, gpus=8,
               priority_class="production-high", priority=100_000)
    waits = _waits(book, T0 + H)
    got = {uid: (f.tenant_id, f.profile, f.instances, f.outcome, f.node, f.scheduled_ms - f.waited_from_ms,
                 f.running_ms - f.scheduled_ms, f.waited_to_ms - f.waited_from_ms, f.priority_class, f.priority)
           for uid, f in waits.items()}
    assert got == {
        "a1": ("alpha", "", 2, "scheduled", "node-1", 7 * M, 2 * M, 9 * M, "batch-low", 100),
        "a2": ("alpha", "", 2, "scheduled", "node-1", 30 * S, 90 * S, 2 * M, "", None),
        "b1": ("beta", "", 8, "scheduled", "node-1", 20 * M, 45 * S, 20 * M + 45 * S, "production-high", 100_000)}
    assert len({f.fact_id for f in waits.values()}) == 3


def test_a_wait_is_a_fact_once_the_watch_has_passed_its_running_and_only_once():
    book, done = _book(), set()
    _lifecycle(book, "team-a", "a1", T0, T0 + M, T0 + 2 * M)  # observed at T0 + 2 min + 2 s
    assert [f.outcome for f in closed_demand(book, "c1", T0 + 2 * M - 1, done)] == [PENDING]
    (wait,) = closed_demand(book, "c1", T0 + 2 * M, done)
    assert (wait.waited_to_ms, wait.running_ms) == (T0 + 2 * M, T0 + 2 * M)
    assert closed_demand(book, "c1", T0 + H, done) == []
    again = OwnershipBook.from_state(book.to_state())  # the state keeps the bind and the priority
    assert (again.pods["a1"].scheduled_ms, again.pods["a1"].running_ms) == (T0 + M, T0 + 2 * M)


def test_a_pod_still_waiting_is_a_pending_fact_from_its_creation_once():
    """Created at T0, bound at +5 min, running at +9: while the watch is between its creation
    and its start it is pending, [T0, T0) with what its creation says (not the bind a later step
    knows); a wait of no length has none; a MIG pod has one per profile."""
    book, done = _book(), set()
    _lifecycle(book, "team-a", "a1", T0, T0 + 5 * M, T0 + 9 * M, priority_class="batch-low", priority=100)
    _lifecycle(book, "team-b", "b1", T0 + 2 * M, None, None, gpus=1, mig="1g.10gb")
    _lifecycle(book, "team-b", "now", T0, T0, T0)  # running at its creation: no wait
    assert closed_demand(book, "c1", T0 - 1, done) == []
    (a1,) = closed_demand(book, "c1", T0 + M, done)
    assert (a1.pod_uid, a1.tenant_id, a1.outcome, a1.waited_from_ms, a1.waited_to_ms, a1.instances, a1.node,
            a1.scheduled_ms, a1.running_ms, a1.priority_class) == (
        "a1", "alpha", PENDING, T0, T0, 2, "", None, None, "batch-low")
    (b1,) = closed_demand(book, "c1", T0 + 6 * M, done)  # a1 is bound by now: nothing new for it
    assert (b1.pod_uid, b1.profile, b1.instances, b1.tenant_id, b1.outcome) == ("b1", "1g.10gb", 1, "beta", PENDING)
    assert b1.fact_id != a1.fact_id
    (wait,) = closed_demand(book, "c1", T0 + H, done)
    assert (wait.pod_uid, wait.outcome, wait.waited_to_ms) == ("a1", "scheduled", T0 + 9 * M)
    assert wait.fact_id != a1.fact_id  # the wait is its own fact; readers pair them by pod and profile


def test_the_facts_do_not_depend_on_how_far_the_watermark_moves_at_a_time():
    def run(steps: list[int]) -> set:
        book, done, out = _book(), set(), set()
        _lifecycle(book, "team-a", "a1", T0, T0 + 5 * M, T0 + 9 * M)
        _lifecycle(book, "team-b", "b1", T0 + 2 * M, None, None, end=T0 + 30 * M, gpus=1, mig="1g.10gb")
        for wm in steps:
            out |= set(closed_demand(book, "c1", wm, done))
        return out

    stepped = run([T0 + k * M for k in range(0, 61)])
    assert stepped == run([T0 + H]) == run([T0 + 3 * M, T0 + 31 * M])
    assert sorted((f.pod_uid, f.outcome) for f in stepped) == [
        ("a1", PENDING), ("a1", "scheduled"), ("b1", "deleted"), ("b1", "ended without running"), ("b1", PENDING)]


def test_pods_that_never_ran_have_no_startup_and_unbound_ones_no_scheduling_delay():
    book = _book()
    _lifecycle(book, "team-a", "bound", T0, T0 + 3 * M, None, end=T0 + 20 * M)  # image never pulled
    _lifecycle(book, "team-b", "unbound", T0, None, None, end=T0 + 30 * M)  # nothing fits
    _lifecycle(book, "team-b", "mig", T0, T0 + M, T0 + 4 * M, gpus=1, mig="1g.10gb")
    waits = _waits(book, T0 + H)
    assert [(waits["bound"].outcome, waits["bound"].scheduled_ms, waits["bound"].running_ms,
             waits["bound"].waited_to_ms)] == [("ended without running", T0 + 3 * M, None, T0 + 20 * M)]
    assert (waits["unbound"].outcome, waits["unbound"].scheduled_ms, waits["unbound"].node) == (
        "ended without running", None, "")
    mig = waits["mig"]
    assert (mig.profile, mig.scheduled_ms - mig.waited_from_ms, mig.running_ms - mig.scheduled_ms) == (
        "1g.10gb", M, 3 * M)


def test_the_ends_carry_the_bind_and_start_too():
    book = _book()
    _lifecycle(book, "team-a", "a1", T0, T0 + M, T0 + 2 * M, end=T0 + H, priority_class="batch-low", priority=100)
    (end,) = [f for f in closed_demand(book, "c1", T0 + H, set()) if f.outcome == "deleted"]
    assert (end.scheduled_ms, end.running_ms, end.priority_class, end.node) == (T0 + M, T0 + 2 * M, "batch-low", "node-1")


def test_without_the_api_times_the_events_times_count():
    """Older captures: no PodScheduled condition, no containerStatuses."""
    book = _book()
    bare = pod_object("team-a", "p", "u1", "", T0, 1, "Pending")
    book.apply("ADDED", bare, T0)
    book.apply("MODIFIED", {**bare, "spec": {**bare["spec"], "nodeName": "n1"}}, T0 + 40 * S)
    book.apply("MODIFIED", {**bare, "spec": {**bare["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}},
               T0 + 70 * S)
    (wait,) = _waits(book, T0 + H).values()
    assert (wait.scheduled_ms, wait.running_ms, wait.node) == (T0 + 40 * S, T0 + 70 * S, "n1")


def test_a_real_pod_object_gives_its_own_times():
    """tests/fixtures/kubernetes/pod-gpu.constructed.json: created 08:14:03, PodScheduled
    08:14:03, its container started 08:15:02; the producer first saw it Running at 08:16:50."""
    pod = json.loads((FIXTURES / "pod-gpu.constructed.json").read_text())
    created = parse_rfc3339_ms("2026-09-01T08:14:03Z")
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("ml-serving", "ns-s", created - H, "search"), created - H)
    pending = copy.deepcopy(pod)
    pending["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    del pending["spec"]["nodeName"]
    book.apply("ADDED", pending, created + 1 * S)
    book.apply("MODIFIED", pod, parse_rfc3339_ms("2026-09-01T08:16:50Z"))
    (wait,) = _waits(book, created + H).values()
    assert (wait.tenant_id, wait.node, wait.instances, wait.priority) == ("search", "gpu-node-a1", 1, 0)
    assert (wait.scheduled_ms - wait.waited_from_ms, wait.running_ms - wait.scheduled_ms) == (0, 59 * S)


def test_odd_shapes_are_no_evidence_and_never_fail():
    book = _book()
    pod = pod_object("team-a", "p", "u1", "n1", T0, 1, "Running")
    odd = [{"conditions": {"type": "PodScheduled"}, "containerStatuses": "running"},
           {"conditions": [None, {"type": "PodScheduled", "status": "True", "lastTransitionTime": "yesterday"}],
            "containerStatuses": [None, {"state": {"running": {"startedAt": 5}}}, {"state": []}]}]
    book.apply("ADDED", pod_object("team-a", "p", "u1", "", T0, 1, "Pending"), T0)
    for i, status in enumerate(odd):
        book.apply("MODIFIED", {**pod, "spec": {**pod["spec"], "priority": [True, 2 ** 40][i],
                                              "priorityClassName": 7}, "status": {"phase": "Running", **status}},
                   T0 + (i + 1) * M)
    life = book.pods["u1"]
    assert (life.scheduled_ms, life.running_ms, life.priority, life.priority_class) == (T0 + M, T0 + M, None, "")
