"""The vGPU producer against a real program named ``nvidia-smi`` (a shell script printing the real
sample text; ``tests/sources/nvidia_smi.py``), with MemorySink."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from sources.nvidia_smi import NvidiaSmiScript

from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.producers.capture_lines import VgpuLine
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import ProducerMetrics
from gpuledger.producers.vgpu_smi import OwnersError, VgpuProducer, VmOwner, parse_vm_owners

VGPU = Path(__file__).resolve().parents[2] / "fixtures" / "vgpu"
REAL_Q = (VGPU / "nvidia-smi-vgpu-q-rtx4080-unlocked-525.txt").read_text()
REAL_TABLE = (VGPU / "nvidia-smi-vgpu-rtx4080-unlocked-525.txt").read_text()
REAL_CSV = (VGPU / "nvidia-smi-query-gpu-rtx4080.constructed.csv").read_text()
A100_Q = (VGPU / "nvidia-smi-vgpu-q-a100x3.constructed.txt").read_text()
A100_CSV = (VGPU / "nvidia-smi-query-gpu-a100x3.constructed.csv").read_text()
GPU_17, GPU_B1 = "GPU-9a1c3e5f-2b4d-4f60-8a1b-c2d3e4f5a617", "GPU-b1f0e9d8-c7b6-4a5f-9e8d-7c6b5a4f3eb1"
RTX = "GPU-f2a7c3d1-8e4b-4c6a-9d2f-1b3e5a7c9d01"
NOBODY = {"tenant_id": "", "project_id": "", "cost_center": ""}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _errors(metrics: ProducerMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("gpuledger_producer_errors_total",
                                             {"source": "vgpu", "reason": reason}) or 0.0


def _sent(metrics: ProducerMetrics) -> float:
    return metrics.registry.get_sample_value("gpuledger_producer_records_total",
                                             {"source": "vgpu", "file": "vgpu.jsonl"}) or 0.0


def _wait(condition, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _owners(path: Path, vms: list[dict]) -> Path:
    path.write_text(json.dumps({"vms": vms}))
    return path


def _producer(smi: NvidiaSmiScript, owners: Path | None, interval_s: float = 0.1, timeout_s: float = 10.0,
              vgpu_command: list[str] | None = None) -> VgpuProducer:
    return VgpuProducer("hv-07", vgpu_command or smi.vgpu_command, smi.gpus_command, owners, interval_s,
                        ProducerMetrics("vgpu"), timeout_s=timeout_s)


def _poll(producer: VgpuProducer, sink: MemorySink, tick_ms: int = 1_790_000_000_000) -> bool:
    return producer.poll(sink, tick_ms, _now_ms)


A100_OWNERS = [
    {"vm_uuid": "5C0038DC-4129-4DC3-8B64-20D309565ABB", "vm_name": "ignored-when-the-uuid-matches",
     "tenant_id": "acme", "project_id": "search", "cost_center": "cc-100"},
    {"vm_name": "train-07", "tenant_id": "globex", "project_id": "llm", "cost_center": "cc-200"},
]
A100_SNAPSHOT = [
    {"vgpu_uuid": "d2668621-addf-11eb-94cf-ca3b2a15ab98", "physical_gpu_uuid": GPU_17, "profile": "A100-4C",
     "vm_uuid": "5c0038dc-4129-4dc3-8b64-20d309565abb", "vm_name": "instance-00002903",
     "owner": {"tenant_id": "acme", "project_id": "search", "cost_center": "cc-100"}},
    {"vgpu_uuid": "3e1a9c55-7b2f-11ee-8c90-0242ac120002", "physical_gpu_uuid": GPU_17, "profile": "A100-20C",
     "vm_uuid": "0b6f1e3c-8a2d-4c5e-9f71-2d4a6b8c0e13", "vm_name": "train-07",
     "owner": {"tenant_id": "globex", "project_id": "llm", "cost_center": "cc-200"}},
    {"vgpu_uuid": "9d3c2b1a-0f4e-4d5c-8b6a-7e8f9a0b1c2d", "physical_gpu_uuid": GPU_B1, "profile": "A100-20C",
     "vm_uuid": "analytics-vm", "vm_name": "analytics-vm", "owner": NOBODY},
]


def test_snapshot_lines_at_grid_ticks_with_owners_and_a_failure_in_between(tmp_path, capsys):
    smi = NvidiaSmiScript(tmp_path / "bin", A100_Q, A100_CSV)
    producer = _producer(smi, _owners(tmp_path / "owners.json", A100_OWNERS), interval_s=0.1)
    sink, stop = MemorySink(), threading.Event()
    worker = threading.Thread(target=producer.run, args=(sink, stop, _now_ms), daemon=True)
    worker.start()
    try:
        _wait(lambda: len(sink.of("vgpu.jsonl")) >= 2, "two snapshots")
        smi.fail(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        _wait(lambda: _errors(producer.metrics, "command_failed") >= 2, "two failed polls")
        seen = len(sink.of("vgpu.jsonl"))
        _wait(lambda: _errors(producer.metrics, "command_failed") >= 4, "four failed polls")
        assert len(sink.of("vgpu.jsonl")) == seen  # a failed read is no snapshot (not "all vGPUs ended")
        smi.recover()
        _wait(lambda: len(sink.of("vgpu.jsonl")) > seen, "a snapshot after recovery")
    finally:
        stop.set()
        worker.join(timeout=20)
    assert not worker.is_alive()
    lines = sink.of("vgpu.jsonl")
    ticks = [parse_rfc3339_ms(line["observed_at"]) for line in lines]
    assert all(t % 100 == 0 for t in ticks) and ticks == sorted(set(ticks))
    for line in lines:
        VgpuLine.model_validate(line)
        assert line["host"] == "hv-07" and line["vgpus"] == A100_SNAPSHOT
    assert sink.flushed == len(sink.lines) and _sent(producer.metrics) == len(lines)
    assert {"vgpu -q", "--query-gpu=pci.bus_id,uuid --format=csv,noheader"} <= set(smi.calls)
    err = capsys.readouterr().err
    assert err.count("couldn't communicate with the NVIDIA driver") == 1  # said once while it lasts
    assert f"`{smi.path} vgpu -q` exited with status 9" in err and "read again without problems" in err


def test_real_sample_snapshot_passes_the_ingest_validator(tmp_path):
    smi = NvidiaSmiScript(tmp_path / "bin", REAL_Q, REAL_CSV)
    owners = _owners(tmp_path / "owners.json", [{"vm_name": "win10test", "tenant_id": "lab"}])
    sink = MemorySink()
    assert _poll(_producer(smi, owners), sink, 1_790_000_000_000)
    (line,) = sink.of("vgpu.jsonl")
    assert VgpuLine.model_validate(line).vgpus[0].owner.tenant_id == "lab"
    assert line == {"observed_at": "2026-09-21T14:13:20Z", "host": "hv-07", "vgpus": [
        {"vgpu_uuid": "00000000-0000-0000-0000-000000000101", "physical_gpu_uuid": RTX, "profile": "RTXA6000-2Q",
         "vm_uuid": "win10test", "vm_name": "win10test",
         "owner": {"tenant_id": "lab", "project_id": "", "cost_center": ""}}]}


def test_owner_file_changes_are_picked_up(tmp_path):
    smi = NvidiaSmiScript(tmp_path / "bin", REAL_Q, REAL_CSV)
    owners = _owners(tmp_path / "owners.json", [{"vm_name": "win10test", "tenant_id": "tenant-a"}])
    producer, sink = _producer(smi, owners), MemorySink()

    def tenant() -> str:
        assert _poll(producer, sink)
        return sink.of("vgpu.jsonl")[-1]["vgpus"][0]["owner"]["tenant_id"]

    assert tenant() == "tenant-a"
    _owners(owners, [{"vm_name": "win10test", "tenant_id": "tenant-a", "project_id": "p1"}])
    assert tenant() == "tenant-a" and sink.of("vgpu.jsonl")[-1]["vgpus"][0]["owner"]["project_id"] == "p1"
    before = owners.stat().st_mtime_ns  # same size, rewritten in place: only the mtime tells
    with owners.open("r+") as fh:
        fh.write(owners.read_text().replace("tenant-a", "tenant-b"))
    os.utime(owners, ns=(before + 1_000_000_000, before + 1_000_000_000))
    assert tenant() == "tenant-b"
    owners.write_text(json.dumps({"vms": []}))
    assert tenant() == ""


def test_vm_without_owner_and_no_owner_file_get_empty_owner_fields(tmp_path):
    smi = NvidiaSmiScript(tmp_path / "bin", A100_Q, A100_CSV)
    sink = MemorySink()
    assert _poll(_producer(smi, None), sink)
    (line,) = sink.of("vgpu.jsonl")
    VgpuLine.model_validate(line)
    assert [v["owner"] for v in line["vgpus"]] == [NOBODY] * 3


def test_invalid_owner_file_is_counted_and_the_last_good_mapping_stays(tmp_path, capsys):
    smi = NvidiaSmiScript(tmp_path / "bin", A100_Q, A100_CSV)
    owners = _owners(tmp_path / "owners.json", A100_OWNERS)
    producer, sink = _producer(smi, owners), MemorySink()
    assert _poll(producer, sink)
    owners.write_text('{"vms": [{"vm_name": "train-07"}]}')
    assert _poll(producer, sink) and _poll(producer, sink)
    assert [line["vgpus"] for line in sink.of("vgpu.jsonl")] == [A100_SNAPSHOT] * 3
    assert _errors(producer.metrics, "owners_invalid") == 2
    assert f"{owners}: vms[0] has no tenant_id" in capsys.readouterr().err
    owners.unlink()
    assert _poll(producer, sink) and sink.of("vgpu.jsonl")[-1]["vgpus"] == A100_SNAPSHOT
    assert _errors(producer.metrics, "owners_unreadable") == 1


def test_gpus_without_vgpus_make_an_empty_snapshot(tmp_path):
    text = "GPU 00000000:17:00.0\n    Active vGPUs                          : 0\n"
    smi = NvidiaSmiScript(tmp_path / "bin", text, A100_CSV)
    sink = MemorySink()
    assert _poll(_producer(smi, None), sink)
    (line,) = sink.of("vgpu.jsonl")
    assert line["vgpus"] == [] and VgpuLine.model_validate(line).vgpus == []


def test_vgpu_on_a_gpu_without_uuid_is_reported_with_an_empty_physical_uuid(tmp_path, capsys):
    smi = NvidiaSmiScript(tmp_path / "bin", A100_Q, "00000000:17:00.0, " + GPU_17 + "\n")
    producer, sink = _producer(smi, None), MemorySink()
    assert _poll(producer, sink)
    (line,) = sink.of("vgpu.jsonl")
    VgpuLine.model_validate(line)
    assert [v["physical_gpu_uuid"] for v in line["vgpus"]] == [GPU_17, GPU_17, ""]
    assert _errors(producer.metrics, "unknown_gpu") == 1
    assert "GPU 00000000:B1:00.0 of" in capsys.readouterr().err


@pytest.mark.parametrize("setup, reason, said", [
    (lambda smi: smi.set_vgpu_q(REAL_TABLE), "bad_output", "line 1: '+---"),
    (lambda smi: smi.set_query_gpu("0, GPU-x\n"), "bad_output", "line 1: '0' is not a PCI bus id"),
    (lambda smi: smi.fail(6, "No devices were found"), "command_failed", "status 6 (No devices were found)"),
])
def test_a_failed_read_is_counted_and_puts_no_line(tmp_path, capsys, setup, reason, said):
    smi = NvidiaSmiScript(tmp_path / "bin", REAL_Q, REAL_CSV)
    setup(smi)
    producer, sink = _producer(smi, None), MemorySink()
    assert not _poll(producer, sink)
    assert sink.lines == [] and _errors(producer.metrics, reason) == 1 and _sent(producer.metrics) == 0
    assert said in capsys.readouterr().err


def test_missing_command_is_counted_and_named(tmp_path, capsys):
    smi = NvidiaSmiScript(tmp_path / "bin", REAL_Q, REAL_CSV)
    missing = tmp_path / "bin" / "nvidia-smi-absent"
    producer, sink = _producer(smi, None, vgpu_command=[str(missing), "vgpu", "-q"]), MemorySink()
    assert not _poll(producer, sink)
    assert sink.lines == [] and _errors(producer.metrics, "command_missing") == 1
    assert f"`{missing} vgpu -q`: {missing} not found" in capsys.readouterr().err


def test_a_hung_command_is_killed_at_the_timeout(tmp_path):
    smi = NvidiaSmiScript(tmp_path / "bin", REAL_Q, REAL_CSV)
    smi.hang(60)
    producer, sink = _producer(smi, None, timeout_s=0.5), MemorySink()
    started = time.monotonic()
    assert not _poll(producer, sink)
    assert time.monotonic() - started < 15  # its child (sleep) was killed too, or the pipes would stay open
    assert sink.lines == [] and _errors(producer.metrics, "timeout") == 1
    smi.recover()
    assert _poll(producer, sink) and len(sink.of("vgpu.jsonl")) == 1


@pytest.mark.parametrize("doc, message", [
    ([], 'expected {"vms": [...]}'),
    ({"vms": [{"tenant_id": "a"}]}, "vms[0] names no VM"),
    ({"vms": [{"vm_name": "x", "tenant_id": 3}]}, "vms[0].tenant_id must be a string"),
    ({"vms": [{"vm_uuid": "AB", "tenant_id": "a"}, {"vm_uuid": "ab", "tenant_id": "b"}]},
     "vms[1] names VM 'ab' again (first in vms[0])"),
])
def test_owner_file_errors(doc, message):
    with pytest.raises(OwnersError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse_vm_owners(doc, "owners.json")


def test_owner_lookup_prefers_the_vm_uuid_over_the_name():
    owners = parse_vm_owners({"vms": [{"vm_uuid": "u-1", "tenant_id": "by-uuid"},
                                      {"vm_name": "web", "tenant_id": "by-name"}]}, "owners.json")
    assert owners.owner_of("U-1", "web").tenant_id == "by-uuid"
    assert owners.owner_of("u-2", "web").tenant_id == "by-name"
    assert owners.owner_of("", "db").tenant_id == ""


def test_owner_file_entries_with_null_or_missing_project_and_cost_center():
    owners = parse_vm_owners({"vms": [{"vm_uuid": "u-1", "vm_name": None, "tenant_id": "alpha", "project_id": None,
                                       "cost_center": None},
                                      {"vm_name": "web", "tenant_id": "beta"}]}, "owners.json")
    assert owners.owner_of("u-1", "") == VmOwner("alpha", "", "")
    assert owners.owner_of("", "web") == VmOwner("beta", "", "")
    with pytest.raises(OwnersError, match="has no tenant_id"):
        parse_vm_owners({"vms": [{"vm_uuid": "u-1", "tenant_id": None}]}, "owners.json")


def test_vgpu_line_optional_fields_may_be_null_or_missing():
    base = {"vgpu_uuid": "GPU-v", "physical_gpu_uuid": "GPU-p", "profile": "A100-4C"}
    for vgpu in ({**base, "vm_uuid": None, "vm_name": None, "owner": {"tenant_id": "a", "project_id": None,
                                                                       "cost_center": None}},
                 {**base, "owner": {"tenant_id": "a"}}):
        (v,) = VgpuLine.model_validate({"observed_at": "2026-10-01T00:00:00Z", "host": "h", "vgpus": [vgpu]}).vgpus
        assert (v.vm_uuid, v.vm_name, v.owner.model_dump()) == ("", "", {"tenant_id": "a", "project_id": "",
                                                                           "cost_center": ""})
    (v,) = VgpuLine.model_validate({"observed_at": "2026-10-01T00:00:00Z", "host": "h",
                                    "vgpus": [{**base, "owner": None}]}).vgpus
    assert v.owner.tenant_id == ""  # no owner: unattributed, as a VM without an entry
