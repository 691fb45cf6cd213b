"""Kubernetes list-then-watch of Namespaces and Pods (all namespaces) -> ``k8s-watch.jsonl`` lines.

Each kind is listed once, each object emitted as an ``ADDED`` event, and then watched from the
list's resourceVersion; every watch event (BOOKMARKs too: they carry the stream's watermark) is
emitted verbatim as ``{"observed_at", "event": {"type", "object"}}``. Namespaces are listed
before Pods, so a pod's namespace is known before the pod.

The producer remembers, per kind, the resourceVersion it has reached and the objects it knows
(uid -> last object, ``managedFields`` left out). When the watch expires (410 Gone: the API
server compacted past that resourceVersion) it lists again and emits only the difference
against what it knows: new objects ``ADDED``, changed ones ``MODIFIED``, vanished ones
``DELETED`` with the last object known. No transition is lost and none repeated.

Delivery: lines are put as events arrive; every ``commit_interval_s`` with new lines the sink is
flushed and only then the state (resourceVersions and known objects) saved. A restart resumes
the watch from the saved resourceVersion (at least once: lines after the last commit may be
sent again); if that has expired it lists and emits the difference as above.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import Watch

from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.lines import LineSink
from gpuledger.producers.runtime import ProducerMetrics, StateFile

__all__ = ["FILE", "KubeConfigError", "KubeWatchProducer", "api_client_for"]

FILE = "k8s-watch.jsonl"
KINDS = ("Namespace", "Pod")  # listed in this order
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.2, 5.0
CONNECT_TIMEOUT_S, LIST_READ_TIMEOUT_S = 10, 120
LIST_PAGE_SIZE = 500


class KubeConfigError(ValueError):
    """No way to reach the Kubernetes API was configured."""


def api_client_for(url: str = "", kubeconfig: Path | None = None) -> client.ApiClient:
    """An API client for ``url`` if given; else for the kubeconfig file (``kubeconfig``, or the
    default ~/.kube/config); else for the in-cluster service account."""
    cfg = client.Configuration()
    if url:
        cfg.host = url.rstrip("/")
        return client.ApiClient(cfg)
    try:
        config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, client_configuration=cfg,
                                persist_config=False)
        return client.ApiClient(cfg)
    except (config.ConfigException, OSError) as exc:
        if kubeconfig is not None:
            raise KubeConfigError(f"kubeconfig {kubeconfig} cannot be used ({exc}): fix the file, or set "
                                  "kube_api_url (GPULEDGER_KUBE_API_URL) to the API server's URL") from exc
        kube_error = exc
    try:
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except config.ConfigException as exc:
        raise KubeConfigError(
            "no Kubernetes API to watch: set kube_api_url (GPULEDGER_KUBE_API_URL) to the API server's URL, or "
            f"kubeconfig (GPULEDGER_KUBECONFIG) to a kubeconfig file (default one: {kube_error}), or run in a pod "
            f"with a service account (in-cluster: {exc})") from exc


def _rv(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _remembered(obj: dict) -> dict:
    """What is kept of an object to emit its DELETED later: all of it but ``managedFields``."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _refusal(exc: ApiException, kind: str) -> str:
    """One line for an API error: the status, the server's own message, and what to check."""
    try:
        message = str(orjson.loads(exc.body or b"{}").get("message") or "")
    except (orjson.JSONDecodeError, AttributeError):
        message = ""
    message = message or " ".join(str(exc.body or "").split())[:300]
    what = f"HTTP {exc.status} {exc.reason}" + (f": {message}" if message else "")
    if exc.status == 401:
        return f"{what}; the API server does not accept the credentials (token or client certificate)"
    if exc.status == 403:
        return (f"{what}; the credentials need get, list and watch on {kind.lower()}s in all namespaces "
                "(the ClusterRole and ClusterRoleBinding in deploy/kubernetes/rbac.yaml)")
    return f"{what}; check the credentials and that they may list and watch {kind.lower()}s"


@dataclass
class _Kind:
    name: str
    rv: str | None = None  # None: list (again) before watching
    known: dict[str, dict] = field(default_factory=dict)  # uid -> last object (see _remembered)
    watch: Watch | None = None


class KubeWatchProducer:
    source = "k8s"

    def __init__(self, api_client: client.ApiClient, metrics: ProducerMetrics, state: StateFile | None = None,
                 watch_timeout_s: int = 300, commit_interval_s: float = 0.1,
                 list_page_size: int = LIST_PAGE_SIZE) -> None:
        self.api = client.CoreV1Api(api_client)
        self.host = api_client.configuration.host
        self.metrics, self.state = metrics, state
        self.watch_timeout_s, self.commit_interval_s = int(watch_timeout_s), commit_interval_s
        self.list_page_size = int(list_page_size)
        self._lists = {"Namespace": self.api.list_namespace, "Pod": self.api.list_pod_for_all_namespaces}
        self._kinds = {name: _Kind(name) for name in KINDS}
        self._lock = threading.Lock()
        self._dirty = False
        self._pods_may_start = threading.Event()
        if state is not None:
            self._restore(state.load())

    # -- state ------------------------------------------------------------------
    def _restore(self, saved: dict) -> None:
        for name, kind in self._kinds.items():
            entry = (saved.get(name) if isinstance(saved, dict) else None) or {}
            objects = entry.get("objects") or [] if isinstance(entry, dict) else None
            if not isinstance(objects, list) or not all(isinstance(o, dict) and _uid(o) for o in objects):
                raise ValueError(f"{self.state.path}: {name}.objects is not a list of objects with metadata.uid: "
                                 "delete the file to list the cluster again")
            kind.rv = str(entry.get("resourceVersion") or "") or None
            kind.known = {_uid(o): o for o in objects}

    def _snapshot(self) -> dict:
        return {name: {"resourceVersion": kind.rv, "objects": list(kind.known.values())}
                for name, kind in self._kinds.items()}

    def _commit(self, sink: LineSink) -> None:
        """Flush the sink, then save the state: what the state says was sent is durable."""
        with self._lock:
            if not self._dirty:
                return
            sink.flush()
            if self.state is not None:
                self.state.save(self._snapshot())
            self._dirty = False

    # -- the loop ------------------------------------------------------------------
    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """List and watch until ``stop`` is set; commit every ``commit_interval_s``."""
        threads = [threading.Thread(target=self._follow, args=(kind, sink, stop, now_ms),
                                    name=f"k8s-watch-{kind.name}", daemon=True) for kind in self._kinds.values()]
        for t in threads:
            t.start()
        while not stop.wait(self.commit_interval_s):
            self._commit_logged(sink)
        while any(t.is_alive() for t in threads):
            for kind in self._kinds.values():
                open_watch = kind.watch
                if open_watch is not None:
                    open_watch.stop()  # shuts the open watch's socket down
            for t in threads:
                t.join(0.05)
        self._commit_logged(sink)

    def _commit_logged(self, sink: LineSink) -> None:
        try:
            self._commit(sink)
        except Exception as exc:  # noqa: BLE001 - the sink's failure is retried at the next commit
            self.metrics.error("sink")
            print(f"k8s watch: the sink failed to flush ({exc}); state not saved, retrying", file=sys.stderr,
                  flush=True)

    def _follow(self, kind: _Kind, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        if kind.name == "Pod":  # namespaces first, unless they cannot be listed at all
            while not self._pods_may_start.wait(0.05):
                if stop.is_set():
                    return
        backoff_s = BACKOFF_FIRST_S
        while not stop.is_set():
            try:
                if kind.rv is None:
                    self._relist(kind, sink, now_ms)
                if kind.name == "Namespace":
                    self._pods_may_start.set()
                self._watch(kind, sink, stop, now_ms)
                backoff_s = BACKOFF_FIRST_S
                continue
            except ApiException as exc:
                if exc.status == 410 and not stop.is_set():
                    self.metrics.error("expired")
                    with self._lock:
                        kind.rv = None
                    continue
                reason, what = ("connect", f"check that the API server is up ({str(exc).strip()})") if not exc.status \
                    else ("api", _refusal(exc, kind.name))
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                reason, what = "connect", (f"cannot reach it ({exc}); check kube_api_url/kubeconfig and that the API "
                                           "server is up")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                reason, what = "payload", (f"unexpected answer ({type(exc).__name__}: {exc}); is it a Kubernetes "
                                           "API server?")
            except Exception as exc:  # noqa: BLE001 - e.g. the sink refusing a line: retried from the last rv
                reason, what = "unexpected", f"{type(exc).__name__}: {exc}"
            if stop.is_set():
                return  # the error is the stop closing the watch
            self._failed(kind, reason, what, backoff_s)
            if kind.name == "Namespace" and reason != "connect":
                self._pods_may_start.set()  # namespaces fail for their own reasons: do not hold pods back
            if stop.wait(backoff_s):
                return
            backoff_s = min(2 * backoff_s, BACKOFF_MAX_S)

    def _failed(self, kind: _Kind, reason: str, what: str, backoff_s: float) -> None:
        self.metrics.error(reason)
        print(f"k8s watch: {kind.name.lower()}s at {self.host}: {what}; retrying in {backoff_s:.1f} s",
              file=sys.stderr, flush=True)

    # -- list and watch ------------------------------------------------------------------
    def _list(self, kind: _Kind) -> tuple[str, list[dict]]:
        """All objects of the kind (pages of one snapshot) and the list's resourceVersion."""
        items, token, rv = [], None, None
        while True:
            resp = self._lists[kind.name](limit=self.list_page_size, _continue=token, _preload_content=False,
                                          _request_timeout=(CONNECT_TIMEOUT_S, LIST_READ_TIMEOUT_S))
            try:
                body = orjson.loads(resp.data)
            finally:
                resp.release_conn()
            meta = body.get("metadata") or {}
            rv = rv or meta.get("resourceVersion")
            for obj in body.get("items") or []:
                items.append({"kind": kind.name, "apiVersion": "v1", **obj})
            token = meta.get("continue")
            if not token:
                break
        if not rv:
            raise ValueError(f"the {kind.name}List has no metadata.resourceVersion")
        return str(rv), items

    def _relist(self, kind: _Kind, sink: LineSink, now_ms: Callable[[], int]) -> None:
        """List, and emit what changed since the objects known: DELETED, then ADDED or MODIFIED."""
        rv, items = self._list(kind)
        now = now_ms()
        self.metrics.observed(now, now)
        listed = {_uid(o): o for o in items}
        with self._lock:
            for uid in [u for u in kind.known if u not in listed]:
                self._put(sink, "DELETED", kind.known.pop(uid), now)
            for uid, obj in listed.items():
                before = kind.known.get(uid)
                if before is None or _rv(before) != _rv(obj):
                    self._put(sink, "ADDED" if before is None else "MODIFIED", obj, now)
                    kind.known[uid] = _remembered(obj)
            kind.rv = rv
            self._dirty = True

    def _watch(self, kind: _Kind, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """One watch request from ``kind.rv`` until the server ends it (``watch_timeout_s``).
        ``return_type=object`` keeps each object the dict the server sent, and lets the client turn an
        ERROR event into an ApiException with the event's code (410: expired)."""
        w = kind.watch = Watch(return_type=object)
        if stop.is_set():
            return
        stream = w.stream(self._lists[kind.name], resource_version=kind.rv, allow_watch_bookmarks=True,
                          timeout_seconds=self.watch_timeout_s,
                          _request_timeout=(CONNECT_TIMEOUT_S, self.watch_timeout_s + 30))
        try:
            for event in stream:
                if stop.is_set():
                    return
                self._on_event(kind, sink, event["type"], event["raw_object"], now_ms)
        finally:
            stream.close()
            kind.watch = None

    def _on_event(self, kind: _Kind, sink: LineSink, event_type: str, obj: dict, now_ms: Callable[[], int]) -> None:
        if not isinstance(obj, dict):
            raise ValueError(f"a {event_type} event whose object is not a JSON object")
        now = now_ms()
        with self._lock:
            self._put(sink, event_type, obj, now)
            uid = _uid(obj)
            if event_type == "DELETED":
                kind.known.pop(uid, None)
            elif event_type in ("ADDED", "MODIFIED") and uid:
                kind.known[uid] = _remembered(obj)
            if _rv(obj):
                kind.rv = _rv(obj)
            self._dirty = True
        self.metrics.observed(now, now)

    def _put(self, sink: LineSink, event_type: str, obj: dict, now: int) -> None:
        sink.put(FILE, {"observed_at": format_rfc3339(now), "event": {"type": event_type, "object": obj}})
        self.metrics.sent(FILE)
