"""The query endpoint of the process that owns the embedded engine (chdb allows one process
per directory): ``POST /query`` with ``{"sql": ..., "parameters": ...}``, on 127.0.0.1, the
URL announced in ``HOME/process.json``. Reads and the sink's writes share one lock."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

__all__ = ["QueryServer"]


class QueryServer:
    def __init__(self, store, lock: threading.Lock, port: int = 0, host: str = "127.0.0.1") -> None:
        self.store, self.lock = store, lock
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                if self.path != "/query":
                    self._send(404, {"error": "POST /query"})
                    return
                try:
                    body = orjson.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                    with outer.lock:
                        columns, rows = outer.store.query(body["sql"], body.get("parameters"))
                except Exception as exc:  # noqa: BLE001 — reported to the caller
                    self._send(400, {"error": str(exc)})
                    return
                self._send(200, {"columns": columns, "rows": rows})

            def _send(self, status: int, payload: dict) -> None:
                data = orjson.dumps(payload, default=str)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="query", daemon=True)

    def start(self) -> QueryServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
