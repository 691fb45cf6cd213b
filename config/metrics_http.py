"""The /metrics listener every gpuledger process serves: Prometheus' exposition, on loopback
unless ``metrics_addr`` says otherwise, and with ``metrics_token`` set only to a scraper that
sends ``Authorization: Bearer TOKEN`` (Prometheus: ``authorization: {credentials_file: ...}``).
The fleet gauges name tenants and their usage: a listener reachable beyond this host without a
token says so on start-up."""

from __future__ import annotations

import hmac
import ipaddress
import socket
import sys
import threading
from http.server import ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

__all__ = ["is_loopback", "serve_metrics", "server_class"]

ACCEPT_QUEUE = 128  # connections the kernel holds before accept: a burst beyond a listener's cap is answered, not dropped


def server_class(ipv6: bool) -> type[ThreadingHTTPServer]:
    """The HTTP server of every gpuledger listener: a thread per connection (daemon threads, so
    a silent client never holds a process open), IPv4 or IPv6 by the address, and an accept queue
    of ``ACCEPT_QUEUE`` so that connections beyond a listener's own cap reach its handler (and are
    refused with a status) instead of waiting in a 5-deep backlog."""
    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ipv6 else socket.AF_INET
        request_queue_size = ACCEPT_QUEUE

    return Server


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return addr == "localhost"


def serve_metrics(registry: CollectorRegistry, port: int, addr: str = "127.0.0.1",
                  token: str | None = None) -> ThreadingHTTPServer:
    """Serve ``registry`` on ``addr``:``port`` (0 = any free port) in a daemon thread; the
    server's ``server_address[1]`` is the port."""
    expected = f"Bearer {token}".encode() if token else None
    base = MetricsHandler.factory(registry)

    class Handler(base):
        timeout = 10.0

        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            if expected is not None and not hmac.compare_digest((self.headers.get("Authorization") or "").encode(),
                                                                expected):
                body = b"a bearer token is required (metrics_token)\n"
                self.send_response(401)
                self.send_header("WWW-Authenticate", "Bearer")
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, *args) -> None:
            pass

    server = server_class(":" in addr)((addr.strip("[]"), port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    if expected is None and not is_loopback(addr):
        print(f"metrics: /metrics on {addr}:{server.server_address[1]} is reachable beyond this host without a "
              "token; set GPULEDGER_METRICS_TOKEN (and the scraper's credentials) unless a network policy "
              "keeps others out", file=sys.stderr, flush=True)
    return server
