"""A kubelet PodResources v1 gRPC server on a unix socket, for tests.

It speaks the real protocol (the generated ``PodResourcesListerServicer``) and serves, by
default, the reference ``ListPodResourcesResponse`` of ``tests/fixtures/kubernetes``. Tests can
change what it answers (``set_response``, ``set_allocatable``; ``None`` = UNIMPLEMENTED, as an
old kubelet), make calls hang (``hang``/``release``), and stop and start it on the same socket.
"""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from google.protobuf import json_format

from gpuledger.producers.podresources_v1 import api_pb2, api_pb2_grpc

__all__ = ["ALLOCATABLE", "REFERENCE", "KubeletPodResources", "reference_response"]

REFERENCE = (Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
             / "podresources-list-response.constructed.json")

ALLOCATABLE = {
    "devices": [
        {"resourceName": "nvidia.com/gpu", "deviceIds": ["GPU-5f6107b0-18cb-4251-8686-d7035569bbf5"],
         "topology": {"nodes": [{"ID": "1"}]}},
        {"resourceName": "nvidia.com/mig-1g.10gb", "deviceIds": ["MIG-94c8f0c4-407d-4e54-98e9-7aa15744d89e"],
         "topology": {"nodes": [{}]}},
        {"resourceName": "nvidia.com/gpu",
         "deviceIds": [f"GPU-edada03a-be5c-4024-b930-a852d5d766fe::{i}" for i in range(4)]},
    ],
    "cpuIds": ["0", "1", "2", "3"],
    "memory": [{"memoryType": "memory", "size": "68719476736", "topology": {"nodes": [{}, {"ID": "1"}]}}],
}


def reference_response() -> dict:
    """The reference ListPodResourcesResponse, as JSON (proto3 mapping)."""
    return json.loads(REFERENCE.read_text())


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: KubeletPodResources) -> None:
        self.kubelet = kubelet

    def List(self, request, context):
        self.kubelet._answer("List", context)
        with self.kubelet._lock:
            return json_format.ParseDict(self.kubelet.response, api_pb2.ListPodResourcesResponse())

    def GetAllocatableResources(self, request, context):
        self.kubelet._answer("GetAllocatableResources", context)
        with self.kubelet._lock:
            allocatable = self.kubelet.allocatable
        if allocatable is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "method GetAllocatableResources not implemented")
        return json_format.ParseDict(allocatable, api_pb2.AllocatableResourcesResponse())

    def Get(self, request, context):
        self.kubelet._answer("Get", context)
        with self.kubelet._lock:
            response = json_format.ParseDict(self.kubelet.response, api_pb2.ListPodResourcesResponse())
        for pod in response.pod_resources:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")


class KubeletPodResources:
    """``with KubeletPodResources(tmp / "kubelet.sock") as kubelet:`` serves until the block ends."""

    def __init__(self, socket_path: Path, response: dict | None = None, allocatable: dict | None = ALLOCATABLE) -> None:
        self.socket_path = Path(socket_path)
        self.response = reference_response() if response is None else response
        self.allocatable = allocatable
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self._server: grpc.Server | None = None

    @property
    def target(self) -> str:
        return "unix://" + str(self.socket_path)

    def start(self) -> KubeletPodResources:
        if self._server is not None:
            raise RuntimeError(f"the test kubelet on {self.socket_path} is already serving")
        server = grpc.server(ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(self.target)
        server.start()
        self._server = server
        return self

    def stop(self, stale_socket: bool = False) -> None:
        """Stop serving now (calls in flight are cancelled). The socket file goes, as when the
        kubelet is gone; ``stale_socket`` leaves one nobody listens on, as after a kubelet crash."""
        server, self._server = self._server, None
        self._released.set()
        if server is not None:
            server.stop(grace=0).wait()
        self.socket_path.unlink(missing_ok=True)
        if stale_socket:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as orphan:
                orphan.bind(str(self.socket_path))

    def set_response(self, response: dict) -> None:
        with self._lock:
            self.response = response

    def set_allocatable(self, allocatable: dict | None) -> None:
        """``None``: GetAllocatableResources answers UNIMPLEMENTED, as an old kubelet."""
        with self._lock:
            self.allocatable = allocatable

    def hang(self) -> None:
        """Calls from now on block until ``release`` (or ``stop``), as a kubelet that stopped answering."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def count(self, method: str) -> int:
        with self._lock:
            return self.calls.get(method, 0)

    def _answer(self, method: str, context) -> None:
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
        while not self._released.wait(0.05):
            if not context.is_active():
                context.abort(grpc.StatusCode.CANCELLED, "the client went away")

    def __enter__(self) -> KubeletPodResources:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
