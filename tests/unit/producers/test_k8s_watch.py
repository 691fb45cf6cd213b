"""The Kubernetes watch producer against a small API server speaking the list/watch protocol."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from sources.kube_apiserver import KubeApiServer, namespace, pod

from gpuledger.producers.k8s_watch import FILE, KubeConfigError, KubeWatchProducer, api_client_for
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import ProducerMetrics, StateFile

NOW_MS = 1_790_000_000_123
WAIT_S = 15


def clock() -> int:
    return NOW_MS


def wait_for(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def events(sink: MemorySink, kind: str | None = None) -> list[tuple[str, str, str]]:
    """(type, uid, resourceVersion) of every non-BOOKMARK line, optionally of one kind."""
    out = []
    for line in sink.of(FILE):
        event = line["event"]
        meta = event["object"]["metadata"]
        if event["type"] != "BOOKMARK" and kind in (None, event["object"]["kind"]):
            out.append((event["type"], meta["uid"], meta["resourceVersion"]))
    return out


def ev(event_type: str, obj: dict) -> tuple[str, str, str]:
    return event_type, obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


def metric(metrics: ProducerMetrics, name: str, **labels) -> float:
    return metrics.registry.get_sample_value(name, {"source": "k8s", **labels}) or 0.0


def errors(metrics: ProducerMetrics, reason: str) -> float:
    return metric(metrics, "gpuledger_producer_errors_total", reason=reason)


def producer(server: KubeApiServer, state: StateFile | None, **kwargs) -> KubeWatchProducer:
    return KubeWatchProducer(api_client_for(server.url), ProducerMetrics("k8s"), state,
                             watch_timeout_s=kwargs.pop("watch_timeout_s", 30), commit_interval_s=0.05, **kwargs)


@contextmanager
def running(prod: KubeWatchProducer, sink: MemorySink):
    stop = threading.Event()
    thread = threading.Thread(target=prod.run, args=(sink, stop, clock), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the producer did not stop"


@pytest.fixture
def server():
    with KubeApiServer(bookmark_interval_s=0.1) as srv:
        yield srv


@pytest.fixture
def state(tmp_path) -> StateFile:
    return StateFile(tmp_path / "k8s-watch.state.json")


def populated(server: KubeApiServer) -> tuple[list[dict], list[dict]]:
    """Two namespaces and three pods; returned in the API server's list order."""
    nss = [server.add(namespace("ml-serving", "search")), server.add(namespace("batch", "catalog"))]
    pods = [server.add(pod("llm-serve-b", "ml-serving")), server.add(pod("embed-1", "batch")),
            server.add(pod("llm-serve-a", "ml-serving"))]
    by_key = lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    return sorted(nss, key=by_key), sorted(pods, key=by_key)


def test_initial_list_emits_namespaces_then_pods_as_added_and_watches_from_the_list(server, state):
    nss, pods = populated(server)
    list_rv = str(server.resource_version)
    prod, sink = producer(server, state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink)) == 5, "the initial list")
        wait_for(lambda: server.watchers("Pod") and server.watchers("Namespace"), "both watches")
        wait_for(lambda: state.load().get("Pod"), "the saved state")

    assert events(sink) == [ev("ADDED", o) for o in nss + pods]
    first = sink.of(FILE)[0]
    assert first["observed_at"] == "2026-09-21T14:13:20.123Z"
    # verbatim, camelCase, with the kind and apiVersion a watch event's object has
    assert [line["event"]["object"] for line in sink.of(FILE)[:5]] == nss + pods
    assert "managedFields" in sink.of(FILE)[3]["event"]["object"]["metadata"]
    lists = [r for r in server.requests if "watch" not in r]
    assert lists == ["/api/v1/namespaces?limit=500", "/api/v1/pods?limit=500"]
    watches = [r for r in server.requests if "watch=true" in r]
    assert {f"resourceVersion={list_rv}" in r and "allowWatchBookmarks=true" in r for r in watches[:2]} == {True}
    saved = state.load()
    assert {o["metadata"]["uid"] for o in saved["Pod"]["objects"]} == {o["metadata"]["uid"] for o in pods}
    assert int(saved["Pod"]["resourceVersion"]) >= int(list_rv)
    assert sink.flushed == len(sink.lines)
    records = metric(prod.metrics, "gpuledger_producer_records_total", file=FILE)
    assert records == len(sink.of(FILE)) >= 5
    assert metric(prod.metrics, "gpuledger_producer_last_success_timestamp_seconds") == NOW_MS / 1000


def test_live_events_are_emitted_in_order_with_bookmarks_passed_through(server, state):
    nss, pods = populated(server)
    prod, sink = producer(server, state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink)) == 5, "the initial list")
        new = server.add(pod("llm-serve-c", "ml-serving", phase="Pending"))
        running_ = server.modify({**new, "status": {**new["status"], "phase": "Running"}})
        gone = server.delete(pods[0])
        team = server.add(namespace("research", "lab"))
        wait_for(lambda: len(events(sink)) == 9, "the live events")
        bookmark_rv = wait_for(lambda: [int(line["event"]["object"]["metadata"]["resourceVersion"])
                                        for line in sink.of(FILE) if line["event"]["type"] == "BOOKMARK"
                                        and line["event"]["object"]["kind"] == "Pod"
                                        and int(line["event"]["object"]["metadata"]["resourceVersion"])
                                        >= server.resource_version], "a bookmark after the events")[-1]

    assert events(sink, "Pod")[3:] == [ev("ADDED", new), ev("MODIFIED", running_), ev("DELETED", gone)]
    assert events(sink, "Namespace")[2:] == [ev("ADDED", team)]
    assert sink.of(FILE)[-1]["event"]["object"]["metadata"]["resourceVersion"]
    saved = state.load()
    assert int(saved["Pod"]["resourceVersion"]) >= bookmark_rv
    assert {o["metadata"]["uid"] for o in saved["Pod"]["objects"]} == {
        pods[1]["metadata"]["uid"], pods[2]["metadata"]["uid"], new["metadata"]["uid"]}
    assert errors(prod.metrics, "expired") == 0


def test_an_expired_watch_relists_and_emits_exactly_the_difference(server, state):
    nss, pods = populated(server)
    prod, sink = producer(server, state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink)) == 5, "the initial list")
        wait_for(lambda: server.watchers("Pod") and server.watchers("Namespace"), "both watches")
        with server.atomically():  # changes the open watches never see: they expire behind them
            deleted_before = pods[1]
            server.delete(pods[1])
            changed = server.modify({**pods[2], "status": {**pods[2]["status"], "phase": "Failed"}})
            added = server.add(pod("late", "batch"))
            server.compact()
        wait_for(lambda: len(events(sink)) == 8, "the relisted difference")
        after = server.modify({**pods[0], "status": {**pods[0]["status"], "phase": "Succeeded"}})
        wait_for(lambda: len(events(sink)) == 9, "a live event after the relist")
        time.sleep(0.3)  # room for a wrongly repeated event to show

    # DELETED first (with the last object known), then the rest in the list's order
    assert events(sink, "Pod")[3:] == [ev("DELETED", deleted_before), ev("ADDED", added), ev("MODIFIED", changed),
                                       ev("MODIFIED", after)]
    assert events(sink, "Namespace") == [ev("ADDED", o) for o in nss]  # relisted, nothing changed
    deleted = sink.of(FILE)[[e[0] for e in events(sink)].index("DELETED")]["event"]["object"]
    assert deleted["metadata"]["name"] == "llm-serve-a" and deleted["spec"] == pods[1]["spec"]
    assert not [line for line in sink.of(FILE) if line["event"]["type"] == "ERROR"]
    assert errors(prod.metrics, "expired") == 2  # both kinds' watches were behind the compaction


def test_restart_resumes_the_watch_from_the_saved_state_without_repeats(server, state):
    nss, pods = populated(server)
    first = MemorySink()
    with running(producer(server, state), first):
        wait_for(lambda: len(events(first)) == 5, "the initial list")
        live = server.modify({**pods[0], "status": {**pods[0]["status"], "phase": "Succeeded"}})
        wait_for(lambda: len(events(first)) == 6, "a live event")
    assert events(first)[-1] == ev("MODIFIED", live)

    changed = server.modify({**pods[1], "status": {**pods[1]["status"], "phase": "Failed"}})
    gone = server.delete(pods[2])
    lists_before = len([r for r in server.requests if "watch" not in r])
    prod, second = producer(server, state), MemorySink()
    with running(prod, second):
        wait_for(lambda: len(events(second)) == 2, "the events missed while down")
        time.sleep(0.3)
    assert events(second) == [ev("MODIFIED", changed), ev("DELETED", gone)]
    assert len([r for r in server.requests if "watch" not in r]) == lists_before  # no relist
    assert errors(prod.metrics, "expired") == 0


def test_restart_after_compaction_relists_and_emits_only_the_difference(server, state):
    nss, pods = populated(server)
    with running(producer(server, state), MemorySink()) as _:
        wait_for(lambda: state.load().get("Pod", {}).get("objects"), "the saved state")

    changed = server.modify({**pods[0], "status": {**pods[0]["status"], "phase": "Succeeded"}})
    server.delete(pods[1])
    added = server.add(pod("after-restart", "batch"))
    renamed_ns = server.modify({**nss[0], "metadata": {**nss[0]["metadata"], "labels": {"gpuledger.io/tenant": "x"}}})
    server.compact()
    prod, sink = producer(server, state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink)) == 4, "the difference")
        time.sleep(0.3)

    assert events(sink, "Pod") == [ev("DELETED", pods[1]), ev("ADDED", added), ev("MODIFIED", changed)]
    assert events(sink, "Namespace") == [ev("MODIFIED", renamed_ns)]
    deleted = sink.of(FILE)[[e[0] for e in events(sink)].index("DELETED")]["event"]["object"]
    assert deleted["metadata"]["labels"] == pods[1]["metadata"]["labels"]
    assert "managedFields" not in deleted["metadata"]  # the state keeps objects without them
    assert errors(prod.metrics, "expired") == 2


def test_the_server_down_then_up_counts_errors_and_recovers(server, state, capfd):
    server.stop()
    prod, sink = producer(server, state), MemorySink()
    with running(prod, sink):
        wait_for(lambda: errors(prod.metrics, "connect") >= 2, "connection errors")
        nss, pods = populated(server)
        server.start()
        wait_for(lambda: len(events(sink)) == 5, "the initial list after the server came up")
        wait_for(lambda: server.watchers("Pod"), "the pod watch")
        server.stop()  # the open watches end; the producer resumes from its resourceVersion
        changed = server.modify({**pods[0], "status": {**pods[0]["status"], "phase": "Failed"}})
        server.start()
        wait_for(lambda: len(events(sink)) == 6, "the change made while the server was down")
        time.sleep(0.3)
    assert events(sink) == [ev("ADDED", o) for o in nss + pods] + [ev("MODIFIED", changed)]
    assert server.url in capfd.readouterr().err
    assert errors(prod.metrics, "expired") == 0


def test_stop_is_prompt_while_watching_and_while_backing_off(state):
    server = KubeApiServer(bookmark_interval_s=60).start()  # a quiet watch: nothing arrives to wake it
    try:
        populated(server)
        prod, sink = producer(server, state, watch_timeout_s=300), MemorySink()
        stop = threading.Event()
        thread = threading.Thread(target=prod.run, args=(sink, stop, clock), daemon=True)
        thread.start()
        wait_for(lambda: server.watchers("Pod") and server.watchers("Namespace"), "both watches")
        started = time.monotonic()
        stop.set()
        thread.join(WAIT_S)
        assert not thread.is_alive() and time.monotonic() - started < 1.0
        assert sink.of(FILE)[-1]["event"]["type"] == "ADDED"  # no bookmark came

        server.stop()
        prod, stop = producer(server, None), threading.Event()
        thread = threading.Thread(target=prod.run, args=(MemorySink(), stop, clock), daemon=True)
        thread.start()
        wait_for(lambda: errors(prod.metrics, "connect") >= 4, "backing off")  # waits of 0.4 s and more now
        started = time.monotonic()
        stop.set()
        thread.join(WAIT_S)
        assert not thread.is_alive() and time.monotonic() - started < 1.0
    finally:
        server.stop()


def test_a_list_in_pages_is_one_snapshot(server, state):
    pods = [server.add(pod(f"p{i}", "batch")) for i in range(5)]
    prod, sink = producer(server, state, list_page_size=2), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink)) == 5, "the paged list")
        time.sleep(0.2)
    assert events(sink) == [ev("ADDED", o) for o in pods]
    assert len([r for r in server.requests if r.startswith("/api/v1/pods?") and "continue=" in r]) == 2


def test_api_client_for_a_url_or_a_kubeconfig(server, tmp_path):
    assert api_client_for(server.url + "/").configuration.host == server.url
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server.url}"}}}}]
users: [{{name: u, user: {{token: t0k3n}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]
current-context: ctx
""")
    api = api_client_for(kubeconfig=kubeconfig)
    assert api.configuration.host == server.url
    server.add(namespace("ml-serving"))
    prod, sink = KubeWatchProducer(api, ProducerMetrics("k8s"), None, commit_interval_s=0.05), MemorySink()
    with running(prod, sink):
        wait_for(lambda: events(sink), "the list through the kubeconfig's client")
    with pytest.raises(KubeConfigError, match="kube_api_url"):
        api_client_for(kubeconfig=tmp_path / "missing")
