"""Live PodResources producer: polls the kubelet's PodResources v1 gRPC API on a unix socket.

At each tick of the grid (``poll_on_grid``) it calls ``List`` and writes one
``podresources.jsonl`` line, a full snapshot of the node::

    {"observed_at": <the tick>, "node": ..., "response": <ListPodResourcesResponse>,
     "allocatable": <AllocatableResourcesResponse>}

Both responses are in the proto3 JSON mapping exactly as ``MessageToDict`` writes it by
default: lowerCamelCase names (``podResources``, ``resourceName``, ``deviceIds``), int64 and
uint64 as strings (``{"ID": "1"}``), and fields holding their proto3 default left out - an
empty list, an empty string, a NUMA node ``ID`` of 0 (``{"ID": "0"}`` reads back as ``{}``),
a node without pods (``{}``). Parsing the line back gives the same message.

``allocatable`` (``GetAllocatableResources``) is asked for on the first tick and then every
``allocatable_interval_s`` (default: every tick); a line carries it when it was read at that
tick. A kubelet that does not serve it (UNIMPLEMENTED: older than 1.23, or the
``KubeletPodResourcesGetAllocatable`` feature gate off) is counted and asked again only every
``UNIMPLEMENTED_RETRY_S``; its ``List`` lines go on without ``allocatable``.

A failed ``List`` (socket missing, UNAVAILABLE, DEADLINE_EXCEEDED, ...) is counted as
``metrics.error(<gRPC status code name>)`` and that tick has no line; the next tick tries again
on a fresh channel (no reconnect backoff after a kubelet restart). Each outage is said once on
stderr, with the socket and what to check, and so is its end. A stop set during a call cancels
it at once. Snapshots need no resume state: nothing is saved.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.lines import LineSink
from gpuledger.producers.podresources_v1 import api_pb2, api_pb2_grpc
from gpuledger.producers.runtime import ProducerMetrics, poll_on_grid

__all__ = ["FILE", "UNIMPLEMENTED_RETRY_S", "PodResourcesProducer", "to_json"]

FILE = "podresources.jsonl"
UNIMPLEMENTED_RETRY_S = 300.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_CANCEL_POLL_S = 0.05


def to_json(message: Message) -> dict:
    """A PodResources message in the proto3 JSON mapping of the capture format (see module doc)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=False,
                                     always_print_fields_with_no_presence=False)


class _Stopped(Exception):
    """The stop event was set while a call was in flight."""


class PodResourcesProducer:
    """One ``podresources.jsonl`` line per grid tick from the kubelet at ``socket_path`` (see module doc).

    ``timeout_s`` bounds each gRPC call; ``allocatable_interval_s`` (default ``interval_s``) is how
    often ``GetAllocatableResources`` is asked for."""

    source = "podresources"

    def __init__(self, socket_path: Path, node: str, interval_s: float, metrics: ProducerMetrics,
                 timeout_s: float = 5.0, allocatable_interval_s: float | None = None) -> None:
        if not node:
            raise ValueError("node is empty: give the node name this kubelet runs on (settings node_name)")
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError(f"interval_s ({interval_s}) and timeout_s ({timeout_s}) must be > 0")
        self.socket_path, self.node, self.interval_s = Path(socket_path), node, interval_s
        self.metrics, self.timeout_s = metrics, timeout_s
        self.allocatable_interval_s = interval_s if allocatable_interval_s is None else allocatable_interval_s
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._allocatable_due_ms: int | None = None
        self._complaints: dict[str, str] = {}
        self._stop = threading.Event()

    @property
    def target(self) -> str:
        return "unix://" + str(self.socket_path)

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Poll on the grid until ``stop`` is set: one line per tick the kubelet answered, flushed."""
        self._stop = stop
        try:
            poll_on_grid(lambda tick_ms: self.poll(sink, tick_ms, now_ms), self.interval_s, now_ms, stop)
        finally:
            self._close()

    def poll(self, sink: LineSink, tick_ms: int, now_ms: Callable[[], int]) -> bool:
        """Read the kubelet once for ``tick_ms``; True when a line was put and flushed."""
        try:
            response = self._call("List", api_pb2.ListPodResourcesRequest())
        except _Stopped:
            return False
        except grpc.RpcError as exc:
            self._failed("List", exc)
            return False
        line = {"observed_at": format_rfc3339(tick_ms), "node": self.node, "response": to_json(response)}
        try:
            allocatable = self._allocatable(tick_ms)
        except _Stopped:
            return False
        if allocatable is not None:
            line["allocatable"] = to_json(allocatable)
        sink.put(FILE, line)
        sink.flush()
        self.metrics.sent(FILE)
        self.metrics.observed(tick_ms, now_ms())
        return True

    def _allocatable(self, tick_ms: int) -> Message | None:
        if self._allocatable_due_ms is not None and tick_ms < self._allocatable_due_ms:
            return None
        self._allocatable_due_ms = tick_ms + int(self.allocatable_interval_s * 1000)
        try:
            return self._call("GetAllocatableResources", api_pb2.AllocatableResourcesRequest())
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._allocatable_due_ms = tick_ms + int(max(UNIMPLEMENTED_RETRY_S, self.allocatable_interval_s) * 1000)
            self._failed("GetAllocatableResources", exc)
            return None

    def _call(self, method: str, request: Message) -> Message:
        """One unary call that gives up when ``stop`` is set (a hung kubelet never holds up a stop)."""
        if self._stub is None:
            self._channel = grpc.insecure_channel(self.target, options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        future = getattr(self._stub, method).future(request, timeout=self.timeout_s)
        while not future.done():
            if self._stop.wait(_CANCEL_POLL_S) and not future.done():
                future.cancel()
                raise _Stopped
        response = future.result()
        if self._complaints.pop(method, None) is not None:
            print(f"podresources: {self.target} answers {method} again", file=sys.stderr, flush=True)
        return response

    def _failed(self, method: str, exc: grpc.RpcError) -> None:
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        reason = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
        self.metrics.error(reason)
        if method == "List":
            self._close()  # a fresh channel next tick: no reconnect backoff after a kubelet restart
        if self._complaints.get(method) != reason:
            self._complaints[method] = reason
            print(f"podresources: {method} on {self.target} failed: {reason} "
                  f"({_details(exc)}); {self._hint(method, code)}", file=sys.stderr, flush=True)

    def _hint(self, method: str, code: grpc.StatusCode | None) -> str:
        if method == "GetAllocatableResources" and code == grpc.StatusCode.UNIMPLEMENTED:
            return ("this kubelet does not serve GetAllocatableResources (older than 1.23, or kubelet "
                    "--feature-gates=KubeletPodResourcesGetAllocatable=false); lines go on without allocatable")
        if not self.socket_path.exists():
            return (f"{self.socket_path} does not exist: check the kubelet runs on this node, the socket path "
                    "(podresources_socket; kubelet default /var/lib/kubelet/pod-resources/kubelet.sock) and that "
                    "the DaemonSet mounts the host's /var/lib/kubelet/pod-resources as a hostPath volume")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return (f"the kubelet did not answer within {self.timeout_s}s: check the kubelet's health "
                    "(systemctl status kubelet) and raise the timeout if the node is very large")
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return ("the kubelet does not serve PodResources v1: check the kubelet version (>= 1.20) and "
                    "--feature-gates (KubeletPodResources)")
        return ("check the kubelet is running and serving PodResources on this socket, the socket path "
                "(podresources_socket), and that the DaemonSet's hostPath mount of /var/lib/kubelet/pod-resources "
                "is readable by this container")

    def _close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None


def _details(exc: grpc.RpcError) -> str:
    details = getattr(exc, "details", None)
    text = details() if callable(details) else None
    return text or str(exc)
