"""The Kubernetes watch producer against a real kube-apiserver and etcd (tests/sources/real_apiserver.py).

What the producer sent is compared with what the API server answered to each write: every
transition, with the resourceVersion the server gave it, in the server's order, none twice.
Each test works in namespaces of its own (the producer lists and watches the whole cluster).
"""

from __future__ import annotations

import itertools
import time

import orjson

import pytest
from kube_support import ANY, FILE, NOW_MS, deletion, errors, ev, events, metric, objects, producer, running, wait_for
from sources.tcp_cut import TcpCut

from gpuledger.producers.capture import CAPTURE_FORMAT
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import StateFile
from pipeline import run_capture

pytestmark = pytest.mark.integration
TENANT = "gpuledger.io/tenant"
_names = itertools.count(1)


@pytest.fixture
def names() -> tuple[str, str]:
    n = next(_names)
    return f"serving-{n}", f"batch-{n}"


@pytest.fixture
def state(tmp_path) -> StateFile:
    return StateFile(tmp_path / "k8s-watch.state.json")


def populated(kube, names) -> tuple[list[dict], list[dict]]:
    """Two namespaces and three pods, in the API server's list order."""
    serving, batch = names
    nss = [kube.namespace(serving, {TENANT: "search"}), kube.namespace(batch, {TENANT: "catalog"})]
    pods = [kube.pod(serving, "llm-serve-b"), kube.pod(batch, "embed-1"), kube.pod(serving, "llm-serve-a")]
    by_key = lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    return sorted(nss, key=by_key), sorted(pods, key=by_key)


def test_list_then_watch_sends_namespaces_then_pods_then_every_change(kube, names, state):
    nss, pods = populated(kube, names)
    ours = set(names)
    prod, sink = producer(kube.kubeconfig(), state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink, ours)) == 5, "the initial list")
        new = kube.pod(names[0], "llm-serve-c")
        started = kube.pod_status(new, phase="Running")
        gone = kube.delete(pods[0])
        team = kube.namespace(f"research-{names[0]}", {TENANT: "lab"})
        ours.add(team["metadata"]["name"])
        wait_for(lambda: len(events(sink, ours)) == 10, "the live events")
        wait_for(lambda: int(state.load().get("Pod", {}).get("resourceVersion") or 0)
                 >= int(gone["metadata"]["resourceVersion"]), "the saved state")

    assert events(sink, ours)[:5] == [ev("ADDED", o) for o in nss + pods]
    kinds = [line["event"]["object"]["kind"] for line in sink.of(FILE)]
    listed_ns = [i for i, line in enumerate(sink.of(FILE)) if line["event"]["object"]["metadata"].get("uid")
                 in {o["metadata"]["uid"] for o in nss}]
    assert max(listed_ns) < kinds.index("Pod")  # every namespace is known before the first pod
    listed = objects(sink, ours)[:5]
    assert all(o["apiVersion"] == "v1" and o["kind"] in ("Namespace", "Pod") for o in listed)
    assert listed[2]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "managedFields" in listed[2]["metadata"]  # sent verbatim
    assert events(sink, ours, "Pod")[3:] == [ev("ADDED", new), ev("MODIFIED", started), *deletion(gone)]
    assert objects(sink, ours, "Pod")[-2]["metadata"]["deletionTimestamp"]
    assert events(sink, ours, "Namespace")[2:] == [ev("ADDED", team)]
    assert sink.of(FILE)[0]["observed_at"] == "2026-09-21T14:13:20.123Z"
    saved = state.load()
    known = {o["metadata"]["uid"] for o in saved["Pod"]["objects"]}
    assert known >= {pods[1]["metadata"]["uid"], pods[2]["metadata"]["uid"], new["metadata"]["uid"]}
    assert pods[0]["metadata"]["uid"] not in known
    assert sink.flushed == len(sink.lines)
    assert metric(prod.metrics, "gpuledger_producer_records_total", file=FILE) == len(sink.of(FILE))
    assert metric(prod.metrics, "gpuledger_producer_last_success_timestamp_seconds") == NOW_MS / 1000
    assert errors(prod.metrics, "expired") == 0


def test_bookmarks_carry_the_watermark_and_are_saved(kube, names, state):
    kube.namespace(names[0])
    # the watch cache sends a BOOKMARK 2 s before a watch's timeout, and every minute (namespaces
    # only: pods are not cached here, and an uncached watch sends none)
    prod, sink = producer(kube.kubeconfig(), state, watch_timeout_s=5), MemorySink()
    with running(prod, sink):
        wait_for(lambda: events(sink, {names[0]}), "the list")
        elsewhere = kube.call("POST", f"/api/v1/namespaces/{names[0]}/configmaps", {"metadata": {"name": "c"}})
        watermark = int(elsewhere["metadata"]["resourceVersion"])  # a write no namespace watch sees
        marks = lambda: [line["event"]["object"] for line in sink.of(FILE)  # noqa: E731
                         if line["event"]["type"] == "BOOKMARK"
                         and int(line["event"]["object"]["metadata"]["resourceVersion"]) >= watermark]
        mark = wait_for(marks, "a bookmark past the write", timeout_s=20)[-1]
        wait_for(lambda: int(state.load()["Namespace"]["resourceVersion"]) >= watermark, "the saved watermark")
        changed = kube.label_namespace(names[0], {TENANT: "later"})
        wait_for(lambda: ev("MODIFIED", changed) in events(sink, {names[0]}), "a later change")
    assert mark["kind"] == "Namespace"
    assert not [line for line in sink.of(FILE) if line["event"]["type"] == "ERROR"]
    assert errors(prod.metrics, "expired") == 0


def test_namespace_labels_and_a_pod_lifecycle_with_preemption_and_eviction(kube, names, state, tmp_path):
    serving, batch = names
    kube.namespace(serving, {TENANT: "search"})
    kube.namespace(batch, {TENANT: "catalog"})
    prod, sink = producer(kube.kubeconfig(), state), MemorySink()
    want = []
    with running(prod, sink):
        wait_for(lambda: len(events(sink, set(names))) == 2, "the namespaces")
        relabelled = kube.label_namespace(serving, {TENANT: "ranking", "cost-center": "cc-4711"})
        want.append(ev("MODIFIED", relabelled))
        done, preempted, evicted, drained = (kube.pod(serving, "train-done"), kube.pod(batch, "low-prio"),
                                             kube.pod(batch, "greedy"), kube.pod(serving, "drained"))
        want += [ev("ADDED", p) for p in (done, preempted, evicted, drained)]
        running_ = {p["metadata"]["name"]: kube.pod_status(p, phase="Running", conditions=[
            {"type": "Ready", "status": "True"}]) for p in (done, preempted, evicted, drained)}
        want += [ev("MODIFIED", p) for p in running_.values()]
        want.append(ev("MODIFIED", kube.pod_status(done, phase="Succeeded")))
        want.append(ev("MODIFIED", kube.pod_status(preempted, conditions=[
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "default-scheduler: preempting to accommodate a higher priority pod"}])))
        want.append(ev("MODIFIED", kube.pod_status(preempted, phase="Failed")))
        want.append(ev("MODIFIED", kube.pod_status(evicted, phase="Failed", reason="Evicted",
                                                   message="The node was low on resource: memory.")))
        kube.evict(drained)  # the Eviction API: condition, then graceful deletion (no kubelet ends it)
        disrupted = kube.get(drained)
        want += [("MODIFIED", drained["metadata"]["uid"], ANY), ev("MODIFIED", disrupted)]
        want += deletion(kube.delete(disrupted))
        wait_for(lambda: len(events(sink, set(names))) >= 2 + len(want), "the lifecycle")
        time.sleep(0.3)

    got = events(sink, set(names))[2:]
    for kind in ("Namespace", "Pod"):  # each kind has its own watch: in order within a kind
        uids = {o["metadata"]["uid"] for o in objects(sink, set(names), kind)}
        assert [e for e in got if e[1] in uids] == [e for e in want if e[1] in uids], kind
    last = {o["metadata"]["name"]: o for o in objects(sink, set(names))}
    assert last[serving]["metadata"]["labels"][TENANT] == "ranking"
    assert last["train-done"]["status"]["phase"] == "Succeeded"
    conditions = {c["type"]: c for c in last["low-prio"]["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == "PreemptionByScheduler"
    assert last["low-prio"]["status"]["phase"] == "Failed"
    assert (last["greedy"]["status"]["phase"], last["greedy"]["status"]["reason"]) == ("Failed", "Evicted")
    conditions = {c["type"]: c for c in last["drained"]["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"
    assert last["drained"]["metadata"]["deletionTimestamp"]

    # what the real API server sent is a capture the pipeline takes whole: nothing dead-lettered
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "manifest.json").write_bytes(orjson.dumps({"format": CAPTURE_FORMAT, "cluster_id": "c1"}))
    (capture / FILE).write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in sink.of(FILE)))
    pipeline, summary = run_capture(capture)
    assert not summary.rejected and not pipeline.dead, (summary.first_rejections, pipeline.dead[:5])
    assert sum(summary.records.values()) >= len(sink.of(FILE))


def test_restart_resumes_the_watch_from_the_saved_state_without_repeats(kube, names, state):
    nss, pods = populated(kube, names)
    first = MemorySink()
    with running(producer(kube.kubeconfig(), state), first):
        wait_for(lambda: len(events(first, set(names))) == 5, "the initial list")
        live = kube.pod_status(pods[0], phase="Succeeded")
        wait_for(lambda: len(events(first, set(names))) == 6, "a live event")
    assert events(first, set(names))[-1] == ev("MODIFIED", live)

    changed = kube.pod_status(pods[1], phase="Failed")
    gone = kube.delete(pods[2])
    relabelled = kube.label_namespace(names[1], {TENANT: "other"})
    prod, second = producer(kube.kubeconfig(), state), MemorySink()
    with running(prod, second):
        wait_for(lambda: len(events(second, set(names))) == 4, "the events missed while down")
        time.sleep(0.5)
    assert events(second, set(names), "Pod") == [ev("MODIFIED", changed), *deletion(gone)]
    assert events(second, set(names), "Namespace") == [ev("MODIFIED", relabelled)]
    assert not [line for line in second.of(FILE) if line["event"]["type"] == "ADDED"]  # no relist
    assert errors(prod.metrics, "expired") == 0


def test_restart_after_compaction_gets_410_and_relists_only_the_difference(kube, names, state):
    nss, pods = populated(kube, names)
    with running(producer(kube.kubeconfig(), state), MemorySink()):
        wait_for(lambda: {p["metadata"]["uid"] for p in pods} <= {
            o["metadata"]["uid"] for o in state.load().get("Pod", {}).get("objects", [])}, "the saved state")

    changed = kube.pod_status(pods[0], phase="Succeeded")
    kube.delete(pods[1])
    added = kube.pod(names[1], "after-restart")
    kube.compact()  # the pod watch from the saved resourceVersion is now 410 Expired
    prod, sink = producer(kube.kubeconfig(), state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink, set(names))) == 3, "the difference")
        time.sleep(0.5)

    # DELETED first (the last object known), then the rest in the list's order
    assert events(sink, set(names)) == [ev("DELETED", pods[1]), ev("ADDED", added), ev("MODIFIED", changed)]
    deleted = objects(sink, set(names))[0]
    assert deleted["metadata"]["name"] == pods[1]["metadata"]["name"] and deleted["spec"] == pods[1]["spec"]
    assert "managedFields" not in deleted["metadata"]  # the state keeps objects without them
    assert errors(prod.metrics, "expired") == 1  # pods; namespaces resume from the watch cache
    assert not [line for line in sink.of(FILE) if line["event"]["type"] == "ERROR"]


def test_a_partition_past_a_compaction_relists_the_difference_while_running(kube, names, state, capfd):
    nss, pods = populated(kube, names)
    cut = TcpCut(kube.port).start()
    try:
        kubeconfig = kube.kubeconfig(name="through-cut")
        kubeconfig.write_text(kubeconfig.read_text().replace(f":{kube.port}\"", f":{cut.port}\""))
        prod, sink = producer(kubeconfig, state), MemorySink()
        with running(prod, sink):
            wait_for(lambda: len(events(sink, set(names))) == 5, "the initial list")
            cut.cut()  # the open watches end; the producer cannot reach the server
            wait_for(lambda: errors(prod.metrics, "connect") >= 2, "connection errors")
            kube.delete(pods[1])
            changed = kube.pod_status(pods[2], phase="Failed")
            added = kube.pod(names[1], "late")
            relabelled = kube.label_namespace(names[0], {TENANT: "moved"})
            kube.compact()
            cut.mend()
            wait_for(lambda: len(events(sink, set(names))) == 9, "the difference after the partition")
            after = kube.pod_status(pods[0], phase="Succeeded")
            wait_for(lambda: len(events(sink, set(names))) == 10, "a live event after the relist")
            time.sleep(0.5)
    finally:
        cut.close()

    # DELETED with the last object known, then the rest in the list's order
    assert events(sink, set(names), "Pod")[3:] == [ev("DELETED", pods[1]), ev("ADDED", added),
                                                   ev("MODIFIED", changed), ev("MODIFIED", after)]
    assert events(sink, set(names), "Namespace") == [ev("ADDED", o) for o in nss] + [ev("MODIFIED", relabelled)]
    assert errors(prod.metrics, "expired") == 1
    assert f"127.0.0.1:{cut.port}" in capfd.readouterr().err


def test_the_api_server_restarted_the_producer_recovers(kube, names, state, capfd):
    nss, pods = populated(kube, names)
    prod, sink = producer(kube.kubeconfig(), state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink, set(names))) == 5, "the initial list")
        kube.stop_apiserver()
        wait_for(lambda: errors(prod.metrics, "connect") >= 1, "a connection error")
        kube.start_apiserver()
        changed = kube.pod_status(pods[0], phase="Failed")
        wait_for(lambda: len(events(sink, set(names))) == 6, "a change after the restart")
        time.sleep(0.3)
    assert events(sink, set(names)) == [ev("ADDED", o) for o in nss + pods] + [ev("MODIFIED", changed)]
    assert kube.url in capfd.readouterr().err


def test_a_list_in_pages_is_one_snapshot_and_stop_is_prompt(kube, names, state):
    kube.namespace(names[1])
    pods = [kube.pod(names[1], f"p{i}") for i in range(5)]
    prod, sink = producer(kube.kubeconfig(), state, list_page_size=2, watch_timeout_s=300), MemorySink()
    with running(prod, sink) as run:
        wait_for(lambda: len(events(sink, {names[1]}, "Pod")) == 5, "the paged list")
        time.sleep(0.5)
        started = time.monotonic()
    assert not run.thread.is_alive() and time.monotonic() - started < 1.0
    assert events(sink, {names[1]}, "Pod") == [ev("ADDED", o) for o in pods]
