"""The query endpoint of the process that owns the embedded engine (chdb allows one process
per directory): ``POST /query`` with ``{"sql": ..., "parameters": ...}``.

What it lets through, and what it does not:

1. Only a caller with the bearer token (``Authorization: Bearer ...``; ``HOME/query.token``,
   mode 0600, or the ``query_token`` setting) gets an answer; others get 401.
2. Only non-browser callers: a request with an ``Origin`` or a cross-site ``Sec-Fetch-Site``
   header is refused (403), and the body must be ``application/json`` (415), so a web page
   cannot send one without a preflight this server never answers.
3. The SQL runs on a session of its own, opened with a time limit, a memory limit, a
   result-row limit and then ``readonly=1`` (``read_limits``): ClickHouse itself refuses
   writes, DDL, table functions reading files or URLs, and any setting changed, the limits
   included. The sink writes on another session: nothing a query does reaches it.
4. Bodies over ``query_max_body_bytes`` are refused (413) unread; a socket is dropped after
   ``READ_TIMEOUT_S`` of silence (a slot held by a silent client comes back then); at most ``MAX_CONNECTIONS`` queries are served at once (503).

It listens on loopback unless ``query_addr`` says otherwise. Queries run on the server's own
threads; they share a lock with the sink's writes (one engine), held at most the time limit.
"""

from __future__ import annotations

import hmac
import threading
from http.server import BaseHTTPRequestHandler

import orjson

from gpuledger.config.metrics_http import server_class
__all__ = ["MAX_CONNECTIONS", "QueryServer", "READ_TIMEOUT_S", "read_limits"]

MAX_CONNECTIONS = 8
READ_TIMEOUT_S = 10.0


def read_limits(max_execution_s: float, max_memory_bytes: int, max_result_rows: int) -> dict:
    """The settings of the endpoint's read-only session, in the order they are applied:
    ``readonly`` last, since it forbids changing any setting after it."""
    return {"max_execution_time": max_execution_s, "max_memory_usage": max_memory_bytes,
            "max_result_rows": max_result_rows, "result_overflow_mode": "throw", "readonly": 1}


class QueryServer:
    def __init__(self, reader, lock: threading.Lock, token: str, port: int = 0, host: str = "127.0.0.1",
                 max_body_bytes: int = 1 << 20, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        """``reader``: a store on a read-only session (``ClickHouseStore(dsn, settings=read_limits(...))``)."""
        if not token:
            raise ValueError("the query endpoint needs a token")
        self.store, self.lock = reader, lock
        expected = f"Bearer {token}".encode()
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._running, self._running_lock = 0, threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = read_timeout_s  # seconds of silence before the socket is dropped

            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                refusal = self._refusal()
                if refusal:
                    self._send(*refusal)
                    return
                if not slots.acquire(blocking=False):
                    self._send(503, {"error": f"{MAX_CONNECTIONS} queries are running: retry"})
                    return
                outer._count(+1)
                try:
                    self._answer()
                finally:
                    outer._count(-1)
                    slots.release()

            def _refusal(self) -> tuple[int, dict] | None:
                if self.path != "/query":
                    return 404, {"error": "POST /query"}
                given = (self.headers.get("Authorization") or "").encode()
                if not hmac.compare_digest(given, expected):
                    return 401, {"error": "a bearer token is required (HOME/query.token, or the query_token setting)"}
                site = self.headers.get("Sec-Fetch-Site")
                if self.headers.get("Origin") is not None or site not in (None, "none", "same-origin"):
                    return 403, {"error": "cross-site requests are refused"}
                if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
                    return 415, {"error": "send Content-Type: application/json"}
                length = self.headers.get("Content-Length")
                if length is None or not length.isdigit():
                    return 411, {"error": "send a Content-Length"}
                if int(length) > max_body_bytes:
                    return 413, {"error": f"body over {max_body_bytes} bytes"}
                return None

            def _answer(self) -> None:
                try:
                    body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    if not isinstance(body, dict) or not isinstance(body.get("sql"), str):
                        raise ValueError('send {"sql": "...", "parameters": {...}}')
                    with outer.lock:
                        columns, rows = outer.store.query(body["sql"], body.get("parameters"))
                except Exception as exc:  # noqa: BLE001 — reported to the caller
                    self._send(400, {"error": str(exc)})
                    return
                self._send(200, {"columns": columns, "rows": rows})

            def _send(self, status: int, payload: dict) -> None:
                data = orjson.dumps(payload, default=str)
                self.send_response(status)
                if status == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = server_class(":" in host)((host.strip("[]"), port), Handler)
        self.host, self.port = host, self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="query", daemon=True)

    def _count(self, step: int) -> None:
        with self._running_lock:
            self._running += step

    @property
    def running(self) -> int:
        """Queries holding a slot now: reading their body, waiting for the engine or running."""
        with self._running_lock:
            return self._running

    def start(self) -> QueryServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
