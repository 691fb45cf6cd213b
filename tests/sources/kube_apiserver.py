"""A small Kubernetes API server for Pods and Namespaces: the list and watch protocol, over HTTP.

Every other test of the watch producer, and the live cluster of the broker tests
(live_cluster.py), runs against a real kube-apiserver and etcd (real_apiserver.py). This one
has a single use, the fault the real one does not produce on demand (tests/unit/producers/
test_k8s_watch.py): changes no open watch sees, then a compaction that ends those open watches
with an in-stream ``ERROR`` 410 (``atomically()`` and ``compact()``; a real server keeps an open
watch in step, and answers 410 only to a new watch from a compacted resourceVersion).

- ``GET /api/v1/pods`` and ``GET /api/v1/namespaces``: a ``PodList``/``NamespaceList`` with
  ``metadata.resourceVersion``; items without ``kind``/``apiVersion``, as the API server sends
  them; ``limit``/``continue`` page through one consistent snapshot.
- the same with ``watch=true``: a chunked stream of newline-delimited watch events whose
  resourceVersion is above ``resourceVersion``, held open for new events until ``timeoutSeconds``,
  with BOOKMARK events when ``allowWatchBookmarks=true``. A ``resourceVersion`` older than the
  compaction point is answered, as the API server does, by an ``ERROR`` event with a 410
  ``Expired`` Status inside a 200 stream; so is an open watch that is behind when ``compact()``
  runs.

Test controls: ``add``/``modify``/``delete`` (each bumps the one global resourceVersion),
``compact()``, ``atomically()`` (changes no open watch sees before the block ends: with
``compact()`` inside, the watches expire without having seen them), ``start``/``stop`` (restart
on the same port). Objects are built from the real-format samples in ``tests/fixtures/kubernetes``.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kubernetes"
PATHS = {"/api/v1/pods": "Pod", "/api/v1/namespaces": "Namespace"}
_uids = itertools.count(1)


def pod(name: str, namespace: str = "ml-serving", uid: str | None = None, phase: str = "Running",
        node: str = "gpu-node-a1") -> dict:
    """A Pod as the API server sends it (the GPU pod sample), renamed."""
    obj = json.loads((FIXTURES / "pod-gpu.constructed.json").read_text())
    meta = obj["metadata"]
    meta.update(name=name, namespace=namespace, uid=uid or f"00000000-0000-4000-8000-{next(_uids):012d}")
    obj["spec"]["nodeName"] = node
    obj["status"]["phase"] = phase
    return obj


def namespace(name: str, tenant: str = "", uid: str | None = None) -> dict:
    """A Namespace as the API server sends it, labelled with its tenant."""
    labels = {"kubernetes.io/metadata.name": name}
    if tenant:
        labels["gpuledger.io/tenant"] = tenant
    return {"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "uid": uid or f"00000000-0000-4000-9000-{next(_uids):012d}",
                         "creationTimestamp": "2026-09-01T08:00:00Z", "labels": labels,
                         "managedFields": [{"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                                            "time": "2026-09-01T08:00:00Z", "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class KubeApiServer:
    def __init__(self, bookmark_interval_s: float = 0.2, start_rv: int = 48_200_000) -> None:
        self.bookmark_interval_s = bookmark_interval_s
        self._cond = threading.Condition(threading.RLock())
        self._rv = start_rv
        self._compacted_rv = start_rv
        self._objects: dict[str, dict[str, dict]] = {"Pod": {}, "Namespace": {}}
        self._history: list[tuple[int, str, str, dict]] = []  # (rv, kind, type, object)
        self._pages: dict[str, tuple[str, list[dict]]] = {}
        self._server: ThreadingHTTPServer | None = None
        self._port = 0
        self._epoch = 0  # bumped by stop(): open watches of an older epoch end
        self.requests: list[str] = []  # paths with query, in arrival order
        self._open: dict[str, int] = {"Pod": 0, "Namespace": 0}

    # -- lifecycle -------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> KubeApiServer:
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- test controls -----------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def watchers(self, kind: str) -> int:
        """How many watches of ``kind`` are open now."""
        with self._cond:
            return self._open[kind]

    def add(self, obj: dict) -> dict:
        return self._change("ADDED", obj)

    def modify(self, obj: dict) -> dict:
        return self._change("MODIFIED", obj)

    def delete(self, obj: dict) -> dict:
        return self._change("DELETED", obj)

    def compact(self) -> None:
        """Forget the history: a watch from an older resourceVersion gets 410 Expired."""
        with self._cond:
            self._compacted_rv = self._rv
            self._history.clear()
            self._cond.notify_all()

    @contextmanager
    def atomically(self):
        """No open watch sends anything until the block ends."""
        with self._cond:
            yield self
            self._cond.notify_all()

    def _change(self, event_type: str, obj: dict) -> dict:
        with self._cond:
            kind, uid = obj["kind"], obj["metadata"]["uid"]
            known = self._objects[kind]
            if event_type == "ADDED" and uid in known:
                raise ValueError(f"{kind} {uid} exists already: modify it")
            if event_type != "ADDED" and uid not in known:
                raise ValueError(f"{kind} {uid} does not exist: add it first")
            self._rv += 1
            stored = copy.deepcopy(obj)
            stored["metadata"]["resourceVersion"] = str(self._rv)
            if event_type == "DELETED":
                del known[uid]
            else:
                known[uid] = stored
            self._history.append((self._rv, kind, event_type, stored))
            self._cond.notify_all()
            return copy.deepcopy(stored)

    # -- protocol ----------------------------------------------------------------
    def list_page(self, kind: str, limit: int, token: str) -> tuple[int, dict]:
        with self._cond:
            if token:
                if token not in self._pages:
                    return 410, _status(410, "Expired", f"continue token {token!r} is not known or expired")
                rv, items = self._pages.pop(token)
            else:
                rv = str(self._rv)
                items = sorted(self._objects[kind].values(),
                               key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
                items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
            meta: dict = {"resourceVersion": rv}
            if limit and len(items) > limit:
                items, rest = items[:limit], items[limit:]
                token = f"{kind}-{rv}-{len(self._pages)}-{time.monotonic_ns()}"
                self._pages[token] = (rv, rest)
                meta["continue"] = token
            return 200, {"kind": f"{kind}List", "apiVersion": "v1", "metadata": meta, "items": copy.deepcopy(items)}

    def watch_events(self, kind: str, from_rv: int | None, timeout_s: float, bookmarks: bool):
        """Yield batches of watch events (lists of dicts) until the watch ends."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._open[kind] += 1
        try:
            yield from self._events(kind, from_rv, deadline, bookmarks)
        finally:
            with self._cond:
                self._open[kind] -= 1

    def _events(self, kind: str, from_rv: int | None, deadline: float, bookmarks: bool):
        with self._cond:
            epoch = self._epoch
            if from_rv is None or from_rv == 0:  # "any": the current state as ADDED, then changes
                batch = [{"type": "ADDED", "object": copy.deepcopy(o)} for o in self._objects[kind].values()]
                from_rv = self._rv
            else:
                batch = []
        if batch:
            yield batch
        pos, last_sent = from_rv, time.monotonic()
        while True:
            with self._cond:
                while True:
                    if self._epoch != epoch or time.monotonic() >= deadline:
                        return
                    if pos < self._compacted_rv:
                        yield [{"type": "ERROR", "object": _status(
                            410, "Expired", f"too old resource version: {pos} ({self._compacted_rv})")}]
                        return
                    batch = [{"type": t, "object": copy.deepcopy(o)} for rv, k, t, o in self._history
                             if rv > pos and k == kind]
                    if batch or (bookmarks and time.monotonic() - last_sent >= self.bookmark_interval_s):
                        break
                    self._cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
                if not batch:
                    batch = [{"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1", "metadata": {
                        "resourceVersion": str(self._rv), "creationTimestamp": None}}}]
                pos = self._rv
            last_sent = time.monotonic()
            yield batch


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urlparse(self.path)
        self.api.requests.append(self.path)
        kind = PATHS.get(url.path)
        if kind is None:
            self._json(404, _status(404, "NotFound", f"the server could not find the requested resource {url.path}"))
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if query.get("watch") in ("true", "1"):
            self._watch(kind, query)
            return
        code, body = self.api.list_page(kind, int(query.get("limit", "0") or 0), query.get("continue", ""))
        self._json(code, body)

    def _watch(self, kind: str, query: dict) -> None:
        rv = query.get("resourceVersion", "")
        try:
            from_rv = int(rv) if rv else None
        except ValueError:
            self._json(400, _status(400, "BadRequest", f"invalid resourceVersion {rv!r}"))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for batch in self.api.watch_events(kind, from_rv, float(query.get("timeoutSeconds", "1800")),
                                               query.get("allowWatchBookmarks") in ("true", "1")):
                for event in batch:
                    data = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away
        self.close_connection = True
