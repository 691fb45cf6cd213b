"""The Kubernetes watch producer on faults a real API server does not produce on demand.

Everything else (list then watch, bookmarks, 410 and relist, restarts, RBAC) is tested against a
real kube-apiserver and etcd: tests/integration/test_kube_watch.py and test_kube_rbac.py. Here:
an open watch ended by an in-stream ERROR 410 (the small server of tests/sources/kube_apiserver.py
compacts behind open watches), no API server at all (backing off, stopping promptly), and the
client's configuration.
"""

from __future__ import annotations

import functools
import socket
import threading
import time

import pytest
from sources.harness import Running, errors, fixed_ms, wait_for
from sources.kube_apiserver import KubeApiServer, namespace, pod

from gpuledger.producers.k8s_watch import FILE, KubeConfigError, KubeWatchProducer, api_client_for
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import ProducerMetrics, StateFile

WAIT_S = 15


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


def producer(server: KubeApiServer, state: StateFile | None, **kwargs) -> KubeWatchProducer:
    return KubeWatchProducer(api_client_for(server.url), ProducerMetrics("k8s"), state,
                             watch_timeout_s=kwargs.pop("watch_timeout_s", 30), commit_interval_s=0.05, **kwargs)


running = functools.partial(Running, clock=fixed_ms, stop_timeout_s=WAIT_S)


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


def test_no_api_server_backs_off_counts_connect_errors_and_stops_promptly(capfd):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    prod, stop = KubeWatchProducer(api_client_for(url), ProducerMetrics("k8s"), None), threading.Event()
    thread = threading.Thread(target=prod.run, args=(MemorySink(), stop, fixed_ms), daemon=True)
    thread.start()
    wait_for(lambda: errors(prod.metrics, "connect") >= 4, "backing off")  # waits of 0.4 s and more now
    started = time.monotonic()
    stop.set()
    thread.join(WAIT_S)
    assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert url in capfd.readouterr().err


def test_api_client_for_a_url_or_a_kubeconfig(tmp_path):
    url = "https://127.0.0.1:6443"
    assert api_client_for(url + "/").configuration.host == url
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: t0k3n}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]
current-context: ctx
""")
    api = api_client_for(kubeconfig=kubeconfig)
    assert api.configuration.host == url
    assert api.configuration.get_api_key_with_prefix("BearerToken") == "Bearer t0k3n"
    with pytest.raises(KubeConfigError, match="kube_api_url"):
        api_client_for(kubeconfig=tmp_path / "missing")
