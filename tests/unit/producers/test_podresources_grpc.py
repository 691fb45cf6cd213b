"""PodResourcesProducer against a real gRPC PodResources server on a unix socket."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path

import orjson
import pytest
from google.protobuf import json_format

from gpuledger.domain.podresources import DeviceHolder, device_holders
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.producers.lines import CaptureSink, MemorySink
from gpuledger.producers.podresources_grpc import PodResourcesProducer
from gpuledger.producers.podresources_v1 import api_pb2
from gpuledger.producers.runtime import ProducerMetrics
from gpuledger.schemas import Codec
from pipeline import ingest
from sources.kubelet_podresources import ALLOCATABLE, KubeletPodResources, reference_response

INTERVAL_S = 0.1
WAIT_S = 15.0


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_for(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.01)


def errors(metrics: ProducerMetrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("gpuledger_producer_errors_total",
                                              {"source": "podresources", "reason": reason})
    return value or 0.0


def expected_response() -> dict:
    """The reference as the producer writes it: proto3 fields at their default are left out,
    so the NUMA node ``{"ID": "0"}`` (int64 0) is written ``{}``; everything else is verbatim."""
    ref = reference_response()
    for pod in ref["podResources"]:
        for container in pod["containers"]:
            for dev in container.get("devices", []):
                for numa in dev.get("topology", {}).get("nodes", []):
                    if numa.get("ID") == "0":
                        del numa["ID"]
    return ref


class Running:
    """A producer running in its own thread until ``stop``."""

    def __init__(self, socket: Path, sink=None, **kwargs) -> None:
        self.metrics = ProducerMetrics("podresources")
        self.sink = sink if sink is not None else MemorySink()
        kwargs.setdefault("timeout_s", 2.0)
        self.producer = PodResourcesProducer(socket, "node-a", kwargs.pop("interval_s", INTERVAL_S), self.metrics,
                                             **kwargs)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.producer.run, args=(self.sink, self.stop_event, wall_ms),
                                       daemon=True)
        self.thread.start()

    @property
    def lines(self) -> list[dict]:
        return list(self.sink.of("podresources.jsonl"))

    def stop(self, timeout_s: float = WAIT_S) -> float:
        started = time.monotonic()
        self.stop_event.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "producer did not stop"
        return time.monotonic() - started


@pytest.fixture
def socket(tmp_path) -> Path:
    return tmp_path / "kubelet.sock"


@pytest.fixture
def kubelet(socket):
    with KubeletPodResources(socket) as server:
        yield server


@pytest.fixture
def running(kubelet, socket):
    runs: list[Running] = []

    def start(**kwargs) -> Running:
        runs.append(Running(socket, **kwargs))
        return runs[-1]

    yield start
    for run in runs:
        run.stop()


def test_lines_at_grid_ticks_carry_the_reference_response(kubelet, running):
    run = running()
    wait_for(lambda: len(run.lines) >= 3, "three lines")
    run.stop()
    lines = run.lines
    ticks = [parse_rfc3339_ms(line["observed_at"]) for line in lines]
    assert all(t % 100 == 0 for t in ticks), ticks
    assert ticks == sorted(set(ticks))
    assert run.sink.flushed == len(run.sink.lines)
    for line in lines:
        assert set(line) == {"observed_at", "node", "response", "allocatable"}
        assert line["node"] == "node-a"
        assert line["response"] == expected_response()
        parsed = json_format.ParseDict(line["response"], api_pb2.ListPodResourcesResponse())
        assert parsed == json_format.ParseDict(reference_response(), api_pb2.ListPodResourcesResponse())
        assert line["allocatable"] == ALLOCATABLE
    assert run.metrics.registry.get_sample_value(
        "gpuledger_producer_records_total", {"source": "podresources", "file": "podresources.jsonl"}) == len(lines)


def test_device_holders_accepts_every_line(kubelet, running):
    run = running()
    wait_for(lambda: len(run.lines) >= 2, "two lines")
    for line in run.lines:
        holders = device_holders(line["response"])
        assert holders == {
            "GPU-5f6107b0-18cb-4251-8686-d7035569bbf5":
                DeviceHolder("ml-serving", "llm-serve-7d9c6b8f5-x2k8p", "vllm", "nvidia.com/gpu"),
            "MIG-94c8f0c4-407d-4e54-98e9-7aa15744d89e":
                DeviceHolder("batch-inference", "embed-batch-20260901-q7z4m", "embedder", "nvidia.com/mig-1g.10gb"),
            "GPU-edada03a-be5c-4024-b930-a852d5d766fe::3":
                DeviceHolder("research", "notebook-ana-0", "jupyter", "nvidia.com/gpu"),
            "GPU-72bd0c37-6f47-4ae8-b0d8-6bf7d8ab2d61::0":
                DeviceHolder("research", "notebook-ben-0", "jupyter", "nvidia.com/gpu.shared"),
        }


def test_recorded_lines_ingest_without_rejections(kubelet, socket, tmp_path):
    capture = CaptureSink(tmp_path / "cap", "prod-ai-1")
    run = Running(socket, sink=capture)
    try:
        wait_for(lambda: capture.lines["podresources.jsonl"] >= 2, "two recorded lines")
    finally:
        run.stop()
    capture.close()
    recorded = [orjson.loads(b) for b in (tmp_path / "cap" / "podresources.jsonl").read_bytes().splitlines()]
    topics, pub, summary = ingest(tmp_path / "cap")
    assert sum(summary.rejected.values()) == 0, summary.first_rejections
    published = [Codec("podresources_snapshot").decode(r.value) for r in pub.records
                 if r.topic == topics.podresources.name]
    assert len(published) == len(recorded)
    assert [orjson.loads(p["response_json"]) for p in published] == [line["response"] for line in recorded]
    assert [p["observed_at_ms"] for p in published] == [parse_rfc3339_ms(line["observed_at"]) for line in recorded]


def test_a_changed_response_is_followed(kubelet, running):
    run = running()
    wait_for(lambda: len(run.lines) >= 1, "a first line")
    fewer = copy.deepcopy(reference_response())
    fewer["podResources"] = [p for p in fewer["podResources"] if p["name"] != "notebook-ana-0"]
    kubelet.set_response(fewer)
    wait_for(lambda: "GPU-edada03a-be5c-4024-b930-a852d5d766fe::3" not in device_holders(run.lines[-1]["response"]),
             "a line without notebook-ana-0")
    kubelet.set_response({})
    wait_for(lambda: run.lines[-1]["response"] == {}, "an empty snapshot")
    assert device_holders(run.lines[-1]["response"]) == {}


@pytest.mark.parametrize("stale_socket", [False, True], ids=["socket-gone", "stale-socket"])
def test_kubelet_down_counts_errors_and_writes_nothing_then_resumes(kubelet, running, socket, capsys, stale_socket):
    run = running()
    wait_for(lambda: len(run.lines) >= 1, "a first line")
    kubelet.stop(stale_socket=stale_socket)
    assert socket.exists() is stale_socket
    time.sleep(3 * INTERVAL_S)  # a line of a call in flight at the stop may still land
    before = len(run.lines)
    wait_for(lambda: errors(run.metrics, "UNAVAILABLE") >= 3, "three UNAVAILABLE errors")
    assert len(run.lines) == before
    stopped_at_ms = wall_ms()
    kubelet.start()
    wait_for(lambda: len(run.lines) >= before + 2, "lines after the restart")
    resumed = run.lines[before:]
    assert all(parse_rfc3339_ms(line["observed_at"]) > stopped_at_ms for line in resumed)
    assert resumed[-1]["response"] == expected_response()
    err = capsys.readouterr().err
    assert f"List on unix://{socket} failed: UNAVAILABLE" in err
    assert err.count("failed: UNAVAILABLE") == 1, err  # said once per outage, counted every time
    assert "answers List again" in err
    if stale_socket:
        assert "kubelet is running" in err, err
    else:
        assert f"{socket} does not exist" in err and "hostPath" in err, err


def test_old_kubelet_without_allocatable_still_gets_lines(kubelet, running, capsys):
    kubelet.set_allocatable(None)
    run = running()
    wait_for(lambda: len(run.lines) >= 3, "three lines")
    assert all("allocatable" not in line and line["response"] == expected_response() for line in run.lines)
    assert errors(run.metrics, "UNIMPLEMENTED") == 1
    assert kubelet.count("GetAllocatableResources") == 1  # not asked again every tick
    assert "KubeletPodResourcesGetAllocatable" in capsys.readouterr().err


def test_allocatable_on_a_slower_cadence(kubelet, running):
    run = running(allocatable_interval_s=60.0)
    wait_for(lambda: len(run.lines) >= 3, "three lines")
    lines = run.lines
    assert lines[0]["allocatable"] == ALLOCATABLE
    assert all("allocatable" not in line for line in lines[1:])
    assert kubelet.count("GetAllocatableResources") == 1


def test_a_kubelet_that_does_not_answer_times_out_then_recovers(kubelet, running):
    run = running(timeout_s=0.2)
    wait_for(lambda: len(run.lines) >= 1, "a first line")
    kubelet.hang()
    time.sleep(3 * INTERVAL_S)
    before = len(run.lines)
    wait_for(lambda: errors(run.metrics, "DEADLINE_EXCEEDED") >= 2, "two DEADLINE_EXCEEDED errors")
    assert len(run.lines) == before
    kubelet.release()
    wait_for(lambda: len(run.lines) >= before + 1, "a line after the kubelet answers again")


def test_stop_is_prompt_while_waiting_for_a_tick(kubelet, running):
    run = running(interval_s=30.0)
    time.sleep(0.2)
    assert run.stop() < 1.0
    assert run.lines == []


def test_stop_is_prompt_during_a_hung_call(kubelet, running):
    kubelet.hang()
    run = running(timeout_s=60.0)
    wait_for(lambda: kubelet.count("List") >= 1, "a List call in flight")
    assert run.stop() < 1.0
    assert run.lines == []
    assert errors(run.metrics, "DEADLINE_EXCEEDED") == 0


def test_bad_arguments_are_refused(socket):
    with pytest.raises(ValueError, match="node name"):
        PodResourcesProducer(socket, "", 10.0, ProducerMetrics("podresources"))
    with pytest.raises(ValueError, match="must be > 0"):
        PodResourcesProducer(socket, "node-a", 0, ProducerMetrics("podresources"))


def test_committed_stubs_are_current(tmp_path):
    pytest.importorskip("grpc_tools")
    from gpuledger.producers.podresources_v1.generate import PACKAGE_DIR, STUBS, generate

    generate(tmp_path)
    for name in STUBS:
        assert (tmp_path / name).read_bytes() == (PACKAGE_DIR / name).read_bytes(), (
            f"{name} is stale: run python -m gpuledger.producers.podresources_v1.generate")
