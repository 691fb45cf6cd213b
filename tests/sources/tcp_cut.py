"""A loopback TCP forwarder that a test can cut: a network partition between a client and a server.

``TcpCut(target_port).start()`` listens on ``port`` and forwards each connection to the target.
``cut()`` closes every open connection and refuses new ones (accepted, then closed at once);
``mend()`` forwards again. Bytes pass through untouched (TLS included).
"""

from __future__ import annotations

import socket
import threading


class TcpCut:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False

    def start(self) -> TcpCut:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for s in self._open:
                _shut(s)
            self._open.clear()

    def mend(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    _shut(conn)
                    continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _shut(conn)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((conn, upstream))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(src)
            _shut(dst)
            with self._lock:
                self._open.discard(src)
                self._open.discard(dst)


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
