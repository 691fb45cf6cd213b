"""Preemption and eviction from the watch stream: a GPU pod the cluster ended becomes one demand
fact (outcome preempted or evicted) over its life, once the watch has passed its end, and only
once; reasons are read as the Kubernetes API writes them."""

import pytest

from gpuledger.demo.builder import namespace_object, pod_object
from gpuledger.domain.demand import closed_demand, prune_done
from gpuledger.domain.k8s import OwnershipBook

T0 = 1_788_000_000_000
H = 3_600_000


def _book() -> OwnershipBook:
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("batch", "ns-1", T0 - H, "catalog"), T0 - H)
    return book


def _status(pod: dict, phase: str | None = None, reason: str | None = None, conditions=None) -> dict:
    status = {**pod["status"], **({"phase": phase} if phase else {}), **({"reason": reason} if reason else {})}
    if conditions is not None:
        status["conditions"] = conditions
    return {**pod, "status": status}


def _disrupted(reason: str) -> list[dict]:
    return [{"type": "Ready", "status": "True"},
            {"type": "DisruptionTarget", "status": "True", "reason": reason,
             "message": "default-scheduler: preempting to accommodate a higher priority pod"}]


@pytest.mark.parametrize("ending, outcome", [
    (lambda p: [("MODIFIED", _status(p, conditions=_disrupted("PreemptionByScheduler"))),
                ("MODIFIED", _status(p, "Failed", conditions=_disrupted("PreemptionByScheduler")))], "preempted"),
    (lambda p: [("MODIFIED", _status(p, "Failed", reason="Evicted"))], "evicted"),
    (lambda p: [("MODIFIED", _status(p, conditions=_disrupted("EvictionByEvictionAPI"))),
                ("DELETED", _status(p, conditions=_disrupted("EvictionByEvictionAPI")))], "evicted"),
    (lambda p: [("MODIFIED", _status(p, "Failed", conditions=_disrupted("TerminationByKubelet")))], "evicted"),
])
def test_a_gpu_pod_ended_by_the_cluster_is_one_fact_over_its_life(ending, outcome):
    book, done = _book(), set()
    pod = pod_object("batch", "low-prio", "pod-1", "n1", T0, 2)
    book.apply("ADDED", pod, T0)
    for i, (kind, obj) in enumerate(ending(pod)):
        book.apply(kind, obj, T0 + 5 * H + i * 1000)
    end = T0 + 5 * H + (len(ending(pod)) - 1) * 1000
    assert book.pods["pod-1"].end_ms == end
    assert closed_demand(book, "c1", end - 1, done) == []  # the watch has not passed its end yet
    (fact,) = closed_demand(book, "c1", end, done)
    assert (fact.tenant_id, fact.pod_uid, fact.profile, fact.instances, fact.waited_from_ms, fact.waited_to_ms,
            fact.outcome) == ("catalog", "pod-1", "", 2, T0, end, outcome)
    assert closed_demand(book, "c1", end + H, done) == []  # once
    again = OwnershipBook.from_state(book.to_state())  # the state keeps what the fact needs
    assert (again.pods["pod-1"].gpus, again.pods["pod-1"].disruption) == (2, outcome)
    assert closed_demand(again, "c1", end + H, done) == []
    assert prune_done(done, book) == 0 and done


def test_pods_that_end_by_themselves_are_completed_or_failed_and_pods_without_gpus_are_not_facts():
    book, done = _book(), set()
    finished = pod_object("batch", "train", "pod-2", "n1", T0, 1)
    book.apply("ADDED", finished, T0)
    book.apply("MODIFIED", _status(finished, "Succeeded"), T0 + H)
    book.apply("DELETED", _status(finished, "Succeeded"), T0 + 2 * H)  # garbage-collected later: ended at H
    crashed = pod_object("batch", "crash", "pod-6", "n1", T0, 1)
    book.apply("ADDED", crashed, T0)
    book.apply("DELETED", _status(crashed, "Failed"), T0 + H)
    scaled = pod_object("batch", "serve", "pod-7", "n1", T0, 1)
    book.apply("ADDED", scaled, T0)
    book.apply("DELETED", scaled, T0 + H)  # deleted while running
    cpu = pod_object("batch", "web", "pod-3", "n1", T0, 0)
    cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    book.apply("ADDED", cpu, T0)
    book.apply("MODIFIED", _status(cpu, "Failed", reason="Evicted"), T0 + H)
    assert book.pods["pod-3"].disruption == "evicted" and book.pods["pod-3"].gpus == 0
    facts = closed_demand(book, "c1", T0 + 2 * H, done)
    assert sorted((f.pod_uid, f.outcome, f.waited_to_ms) for f in facts) == [
        ("pod-2", "completed", T0 + H), ("pod-6", "failed", T0 + H), ("pod-7", "deleted", T0 + H)]


def test_a_mig_pod_preempted_names_its_profile_and_keeps_its_wait():
    book, done = _book(), set()
    pod = pod_object("batch", "mig-job", "pod-4", "", T0, 1, phase="Pending", mig_profile="1g.10gb")
    book.apply("ADDED", pod, T0)
    book.apply("MODIFIED", _status({**pod, "spec": {**pod["spec"], "nodeName": "n1"}}, "Running"), T0 + H)
    book.apply("MODIFIED", _status(pod, "Failed", conditions=_disrupted("PreemptionByScheduler")), T0 + 3 * H)
    facts = sorted(closed_demand(book, "c1", T0 + 3 * H, done), key=lambda f: f.outcome)
    assert [(f.profile, f.outcome, f.waited_from_ms, f.waited_to_ms) for f in facts] == [
        ("1g.10gb", "pending", T0, T0), ("1g.10gb", "preempted", T0, T0 + 3 * H), ("1g.10gb", "scheduled", T0, T0 + H)]
    assert len({f.fact_id for f in facts}) == 3


def test_odd_condition_shapes_are_not_disruptions():
    book = _book()
    pod = pod_object("batch", "x", "pod-5", "n1", T0, 1)
    book.apply("ADDED", pod, T0)
    book.apply("MODIFIED", {**pod, "status": {"phase": "Running", "conditions": {"type": "DisruptionTarget"}}}, T0 + 1)
    book.apply("MODIFIED", _status(pod, conditions=[{"type": "DisruptionTarget", "status": "False",
                                                     "reason": "PreemptionByScheduler"}, "junk"]), T0 + 2)
    assert book.pods["pod-5"].disruption == ""
