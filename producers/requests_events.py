"""Request events of the model servers -> ``requests.jsonl`` lines (one per finished request).

The model-server gateway writes one access-log record per finished request, a JSON object on
one line (the same object may be POSTed to ``/v1/requests``)::

    {"request_id": "req-7f3a",            # or "id": the OpenAI response id (chatcmpl-...)
     "endpoint_id": "qwen-shared",        # the gpuledger.io/endpoint label of the serving pods
     "model": "Qwen/Qwen3-0.6B", "revision": "c1899de",   # revision optional
     "tenant_id": "team-a", "project_id": "chat",          # project optional
     "arrived_at": "2026-10-01T00:00:09.120Z",            # RFC 3339, or unix seconds (a number)
     "finished_at": "2026-10-01T00:00:10.000Z",           # idem; the event time of the line
     "queue_s": 0.01, "ttft_s": 0.08, "e2e_s": 0.88,      # optional timings, seconds
     "usage": {"prompt_tokens": 12, "completion_tokens": 64, "total_tokens": 76},  # the response's usage
     "status": 200}                       # HTTP status, or "outcome": success | error | cancelled

Mapping: ``observed_at`` = ``finished_at`` (else ``arrived_at`` + ``e2e_s``, else when the
record was read); tokens from ``usage`` (or top-level ``prompt_tokens``/``completion_tokens``),
0 for a failed or cancelled request without usage; ``e2e_s`` = finished - arrived when not
given; outcome from ``outcome``, else ``status`` (2xx success, 499 = client closed: cancelled,
other codes error; words like ok/failed/aborted are understood). A field that cannot be
mapped is left out, so the ingest validator (``PublishSink``) dead-letters the line with the
field as the reason; a line that is not a JSON object is put as ``{"observed_at", "raw"}`` for
the same reason. Nothing is dropped here: the dead-letter topic is where bad records go.

``RequestLogProducer`` tails the log like ``tail -F``; ``RequestHttpReceiver`` takes records
over HTTP from authenticated reporters and answers 202 only once they are durable.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import orjson

from gpuledger.config import metrics_http
from gpuledger.producers.lines import LineSink
from gpuledger.producers.request_auth import Reporter, ReporterDirectory, ReportersFile
from gpuledger.producers.request_records import parse_body, request_line, text_line, time_ms
from gpuledger.producers.runtime import ProducerMetrics, StateFile

__all__ = ["RequestHttpReceiver", "RequestLogProducer"]

FILE = "requests.jsonl"


def _newest_ms(lines: list[dict]) -> int | None:
    times = [t for t in (time_ms(line.get("observed_at")) for line in lines) if t is not None]
    return max(times, default=None)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _until_ms(stop: threading.Event) -> int | None:
    return getattr(stop, "until_ms", None)


class RequestLogProducer:
    """Tails a JSONL access log (``tail -F``: follows rotation and truncation) into ``requests.jsonl``.

    Resume state: the log's device + inode and the byte offset just past the last complete
    line handed to the sink; saved after each ``sink.flush()`` (write, then commit). Killed at
    any point, a restart goes on from the saved offset: nothing flushed is lost, and only a
    batch flushed but not yet saved is put again (the request fact id derives from
    ``request_id``, so it dedupes). A partial last line waits for its newline. Rotation (the
    path now names another file): the old file is read to its end (a final unterminated line
    is taken as is: its writer has moved on), then the new file from 0. Truncation (the file
    shrank below the offset): read again from 0. A log started from scratch is read from its
    beginning. Not covered: a log rotated twice while the producer was down (the middle file
    is not looked for), and a copytruncate that regrew past the offset before it was noticed.
    """

    source = "requests"

    def __init__(self, path: Path, metrics: ProducerMetrics, state: StateFile | None = None,
                 poll_s: float = 0.2, batch_bytes: int = 1 << 20) -> None:
        self.path, self.metrics, self.state, self.poll_s, self.batch_bytes = Path(path), metrics, state, poll_s, batch_bytes
        self._fh = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0  # just past the last complete line flushed
        self._pending = b""  # read past the offset: the start of a line without its newline yet
        self._rotation_seen = False
        self._waiting_said = False

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Tail until ``stop`` is set; a failed sink is retried from the last saved offset."""
        until = _until_ms(stop)
        try:
            while not stop.is_set() and (until is None or now_ms() < until):
                try:
                    progressed = self.step(sink, now_ms)
                except Exception as exc:  # the sink (the broker) or the state failed: back to what was committed
                    self.metrics.error("sink")
                    _say(f"requests: lines of {self.path} from byte {self._offset} not delivered or not committed "
                         f"({type(exc).__name__}: {exc}): check the broker and the state file; retrying")
                    self._rewind()
                    progressed = False
                if not progressed:
                    stop.wait(self.poll_s)
        finally:
            self._close()

    def step(self, sink: LineSink, now_ms: Callable[[], int]) -> bool:
        """Read what is new, put and flush it, save the offset. Returns whether anything was read."""
        if self._fh is None and not self._open():
            return False
        data = self._fh.read(self.batch_bytes)
        if data:
            self._rotation_seen = False
            self._pending += data
            cut = self._pending.rfind(b"\n")
            if cut >= 0:
                chunk, self._pending = self._pending[:cut + 1], self._pending[cut + 1:]
                self._publish(sink, chunk, now_ms)
            return True
        return self._at_end(sink, now_ms)

    # -- the file ------------------------------------------------------------------------
    def _open(self) -> bool:
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            if not self._waiting_said:
                _say(f"requests: {self.path} does not exist yet: waiting for the gateway to write it")
                self._waiting_said = True
            return False
        except OSError as exc:
            self.metrics.error("unreadable")
            _say(f"requests: cannot open {self.path} ({exc.strerror}): check its permissions")
            return False
        st = os.fstat(fh.fileno())
        ident = (st.st_dev, st.st_ino)
        saved = self.state.load() if self.state is not None else {}
        offset = 0
        if [saved.get("dev"), saved.get("ino")] == list(ident) and 0 <= int(saved.get("offset", 0)) <= st.st_size:
            offset = int(saved.get("offset", 0))
        fh.seek(offset)
        self._fh, self._ident, self._offset, self._pending = fh, ident, offset, b""
        self._waiting_said = False
        return True

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _rewind(self) -> None:
        if self._fh is not None:
            self._fh.seek(self._offset)
        self._pending = b""

    def _at_end(self, sink: LineSink, now_ms: Callable[[], int]) -> bool:
        """At the end of the open file: has it been rotated away or truncated?"""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed, the new one not created yet: the writer may still append to the old
        if (st.st_dev, st.st_ino) != self._ident:
            if not self._rotation_seen:  # give the writer one more poll to finish the old file
                self._rotation_seen = True
                return False
            if self._pending:  # the old file's last line, never terminated
                chunk, self._pending = self._pending + b"\n", b""
                self._publish(sink, chunk, now_ms, advance=len(chunk) - 1)
            self._close()
            self._rotation_seen = False
            self._save_position(None)  # forget the old file; the next _open starts the new one at 0
            return True
        if st.st_size < self._offset + len(self._pending):
            _say(f"requests: {self.path} was truncated (now {st.st_size} bytes, read up to "
                 f"{self._offset + len(self._pending)}): reading it again from the start")
            self._offset, self._pending = 0, b""
            self._fh.seek(0)
            self._save_position(self._ident)
            return True
        return False

    def _save_position(self, ident: tuple[int, int] | None) -> None:
        if self.state is not None:
            self.state.save({"path": str(self.path), "dev": ident and ident[0], "ino": ident and ident[1],
                             "offset": self._offset if ident else 0})

    # -- the lines -------------------------------------------------------------------------
    def _publish(self, sink: LineSink, chunk: bytes, now_ms: Callable[[], int], advance: int | None = None) -> None:
        read_ms, lines, at = now_ms(), [], self._offset
        for raw in chunk.split(b"\n")[:-1]:
            text = raw.rstrip(b"\r")
            if text.strip():
                line, problem = text_line(text, read_ms)
                if problem is not None:
                    self.metrics.error("not_json")
                    _say(f"requests: {self.path} byte {at}: {problem}; sent to the dead-letter topic")
                sink.put(FILE, line)
                lines.append(line)
            at += len(raw) + 1
        if lines:
            sink.flush()
        self._offset += len(chunk) if advance is None else advance
        self._save_position(self._ident)
        if lines:
            self.metrics.sent(FILE, len(lines))
            newest = _newest_ms(lines)
            if newest is not None:
                self.metrics.observed(newest, now_ms())


class RequestHttpReceiver:
    """``POST /v1/requests`` (one record, a JSON array, or JSONL) -> ``requests.jsonl`` lines.

    1. The caller is a reporter of the reporters document (``producers/request_auth.py``):
       ``Authorization: Bearer TOKEN``, else 401 and nothing is read.
    2. Each record for a tenant or endpoint the reporter may not report for is dead-lettered
       with that reason; so is each the ingest validator refuses (``PublishSink``).
    3. The answer comes after ``sink.flush()`` returned: 202 ``{"accepted": n, "rejected":
       [{"index", "request_id", "reason"}]}`` when at least one record was published, 422
       with the same shape when none was; a client that got no answer may send again (the
       request fact id derives from ``request_id``: a repeat dedupes). 503 when the sink
       failed; 400 with the reason for a body that is not JSON records (nothing of it kept).
    4. Bodies over ``MAX_BODY_BYTES`` are refused unread (413); at most ``MAX_CONNECTIONS``
       requests are served at once (503); a socket silent for ``READ_TIMEOUT_S`` is dropped.

    The socket is bound on construction (``listen`` ``host:port``; port 0 = any free one, see
    ``port``); ``run`` serves.
    """

    source = "requests"
    PATH = "/v1/requests"
    MAX_BODY_BYTES = 4 << 20
    MAX_CONNECTIONS = 16
    READ_TIMEOUT_S = 10.0

    def __init__(self, listen: str, metrics: ProducerMetrics, reporters: ReportersFile | ReporterDirectory) -> None:
        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"requests_listen {listen!r} is not host:port (e.g. 127.0.0.1:8089, 0.0.0.0:8089)")
        host = host.strip("[]") or "127.0.0.1"
        self.metrics, self.reporters = metrics, reporters
        self._sink: LineSink | None = None
        self._now_ms: Callable[[], int] | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._in_progress, self._slots_lock = 0, threading.Lock()
        server_class = metrics_http.server_class(":" in host)
        try:
            self._server = server_class((host, int(port)), _handler(self))
        except OSError as exc:
            raise ValueError(f"cannot listen on {listen} ({exc.strerror}): choose another requests_listen") from exc
        self.port: int = self._server.server_address[1]

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Serve until ``stop`` is set, then close the socket."""
        self._sink, self._now_ms = sink, now_ms
        self._ready.set()
        serving = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                   name="requests-http", daemon=True)
        serving.start()
        until = _until_ms(stop)
        try:
            while not stop.wait(0.1):
                if until is not None and now_ms() >= until:
                    break
        finally:
            self._server.shutdown()
            self._server.server_close()
            serving.join(5)

    @property
    def in_progress(self) -> int:
        """Requests holding a slot now: reading their body, waiting for the sink or answering."""
        with self._slots_lock:
            return self._in_progress

    def hold_slot(self) -> bool:
        """Take one of the ``MAX_CONNECTIONS`` slots; False when every one is held."""
        with self._slots_lock:
            if self._in_progress >= self.MAX_CONNECTIONS:
                return False
            self._in_progress += 1
            return True

    def release_slot(self) -> None:
        with self._slots_lock:
            self._in_progress -= 1

    def reporter(self, authorization: str | None) -> Reporter | None:
        directory = self.reporters.get() if isinstance(self.reporters, ReportersFile) else self.reporters
        return directory.identify(authorization)

    def accept(self, body: bytes, reporter: Reporter) -> tuple[int, dict]:
        """Handle one POSTed body of ``reporter``: (HTTP status, JSON answer)."""
        try:
            records = parse_body(body)
        except ValueError as exc:
            self.metrics.error("bad_body")
            return 400, {"error": str(exc)}
        if not self._ready.wait(10):
            return 503, {"error": "the receiver is not running yet: retry"}
        read_ms = self._now_ms()
        lines = [request_line(r, read_ms) for r in records]
        rejected, published = [], []
        try:
            with self._lock:  # one batch at a time: the answer is given once every line of it is durable
                for i, line in enumerate(lines):
                    reason = reporter.refusal(line.get("tenant_id"), line.get("endpoint_id"))
                    if reason is not None:
                        self.metrics.error("not_allowed")
                        self._sink.reject(FILE, line, reason)
                    else:
                        reason = self._sink.put(FILE, line)
                    if reason is None:
                        published.append(line)
                    else:
                        rejected.append({"index": i, "request_id": line.get("request_id"), "reason": reason})
                self._sink.flush()
        except Exception as exc:
            self.metrics.error("sink")
            _say(f"requests: {len(lines)} request events received on :{self.port} not delivered "
                 f"({type(exc).__name__}: {exc}): check the broker; the client was told 503")
            return 503, {"error": f"not stored ({type(exc).__name__}): retry"}
        self.metrics.sent(FILE, len(published))
        newest = _newest_ms(published)
        if newest is not None:
            self.metrics.observed(newest, self._now_ms())
        answer = {"accepted": len(published), "rejected": rejected}
        return (202 if published or not lines else 422), answer


def _handler(receiver: RequestHttpReceiver):
    class Handler(BaseHTTPRequestHandler):
        timeout = receiver.READ_TIMEOUT_S  # seconds of silence before the socket is dropped

        def do_POST(self) -> None:
            if self.path.split("?")[0] != receiver.PATH:
                self._answer(404, {"error": f"POST request events to {receiver.PATH}"})
                return
            reporter = receiver.reporter(self.headers.get("Authorization"))
            if reporter is None:
                receiver.metrics.error("unauthenticated")
                self._answer(401, {"error": "send Authorization: Bearer TOKEN, a token of the reporters document"})
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._answer(411, {"error": "send a Content-Length"})
                return
            if int(length) > receiver.MAX_BODY_BYTES:
                self._answer(413, {"error": f"body over {receiver.MAX_BODY_BYTES} bytes: send smaller batches"})
                return
            if not receiver.hold_slot():
                self._answer(503, {"error": f"{receiver.MAX_CONNECTIONS} requests in progress: retry"})
                return
            try:
                try:
                    body = self.rfile.read(int(length))
                except OSError:
                    self.close_connection = True
                    return
                self._answer(*receiver.accept(body, reporter))
            finally:
                receiver.release_slot()

        def _answer(self, status: int, doc: dict) -> None:
            body = orjson.dumps(doc)
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler
