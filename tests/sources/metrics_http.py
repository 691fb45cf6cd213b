"""A small HTTP server answering ``GET /metrics`` (Prometheus text), for tests.

Tests choose the body (``render``), make it fail (``status``), slow it down (``delay_s``),
count scrapes, and stop and start it again on the same port.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["MetricsServer"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsServer:
    def __init__(self, render: Callable[[], str], port: int = 0) -> None:
        self.render = render
        self.status = 200
        self.delay_s = 0.0
        self.scrapes = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.port = port
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self._send(404, b"not found\n", "text/plain")
                    return
                with owner._lock:
                    owner.scrapes += 1
                    status, delay_s = owner.status, owner.delay_s
                if delay_s:
                    time.sleep(delay_s)
                if status != 200:
                    self._send(status, b"internal error\n", "text/plain")
                    return
                self._send(200, owner.render().encode(), CONTENT_TYPE)

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
