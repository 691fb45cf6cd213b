"""Reads a hypervisor host's vGPUs with ``nvidia-smi`` on the grid and emits ``vgpu.jsonl`` lines.

At every multiple of the interval (``poll_on_grid``) the producer runs two commands:
``nvidia-smi vgpu -q`` (the vGPUs, per physical GPU bus id) and ``nvidia-smi
--query-gpu=pci.bus_id,uuid --format=csv,noheader`` (bus id -> physical GPU UUID), parses them
(``gpuledger.domain.nvidia_smi``), attaches each VM's owner from the owner mapping file, and puts
ONE line holding the host's full snapshot, stamped with the tick:

    {"observed_at", "host", "vgpus": [{"vgpu_uuid", "physical_gpu_uuid", "profile", "vm_uuid",
                                       "vm_name", "owner": {"tenant_id", "project_id", "cost_center"}}]}

then flushes the sink. ``vgpu_uuid`` and ``vm_uuid`` are the identities the parser falls back to
when the driver leaves the UUIDs empty (MDEV UUID, ``<bus id>/<vGPU ID>``; VM Name).

A snapshot is all-or-nothing: a vGPU missing from it has ended. So when a command is missing,
fails, times out or prints something that is not its format, no line is put for that tick (the
previous snapshot stays the truth until the next good one); the failure is counted in
``metrics.error(reason)`` (``command_missing``, ``command_failed``, ``timeout``, ``bad_output``)
and said on stderr with the command and what to check.

A vGPU whose bus id has no UUID in the second command's answer is still reported, with
``physical_gpu_uuid`` ``""``, and counted as ``unknown_gpu``: dropping it would tell the engine
that the vGPU ended, and a made-up id could be taken for a real GPU. The engine attributes a vGPU
on a GPU that is not in the inventory as unattributed, with a reason, so the gap stays visible.

Owner mapping file (JSON; re-read when its mtime, size or inode changes):

    {"vms": [{"vm_uuid": "...", "vm_name": "...", "tenant_id": "...", "project_id": "...",
              "cost_center": "..."}]}

A VM is matched by its UUID first (case-insensitive), else by its name. A VM with no entry gets
empty owner fields, which the engine reports as unattributed ("VM ... has no owner"). A file
that cannot be read or is invalid is counted (``owners_unreadable``, ``owners_invalid``) and the
last good mapping (none at first) stays in use: the snapshot of which vGPUs exist is still true.
There is no resume state: a snapshot is not fetched later for a missed tick.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from gpuledger.domain.nvidia_smi import NvidiaSmiError, VgpuRecord, parse_gpu_uuids, parse_vgpu_query
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.producers.lines import LineSink
from gpuledger.producers.runtime import ProducerMetrics, poll_on_grid

__all__ = ["CommandError", "OwnersError", "VgpuProducer", "VmOwner", "VmOwners", "parse_vm_owners", "run_command"]

FILE = "vgpu.jsonl"
_KILL_WAIT_S = 5.0


class CommandError(Exception):
    """A command that gave no usable output; ``reason`` is the metrics label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class OwnersError(ValueError):
    """The owner mapping file is not ``{"vms": [...]}`` as documented."""


@dataclass(frozen=True)
class VmOwner:
    tenant_id: str = ""
    project_id: str = ""
    cost_center: str = ""


_NO_OWNER = VmOwner()


@dataclass(frozen=True)
class VmOwners:
    by_uuid: dict[str, VmOwner]  # lower-cased VM UUID
    by_name: dict[str, VmOwner]

    def owner_of(self, vm_uuid: str, vm_name: str) -> VmOwner:
        found = self.by_uuid.get(vm_uuid.lower()) if vm_uuid else None
        if found is None and vm_name:
            found = self.by_name.get(vm_name)
        return found or _NO_OWNER


def parse_vm_owners(doc: object, where: str) -> VmOwners:
    """``{"vms": [{"vm_uuid"?, "vm_name"?, "tenant_id", "project_id"?, "cost_center"?}]}`` -> VmOwners.
    Each entry names its VM by uuid and/or name; a uuid or name given twice is an error."""
    if not isinstance(doc, dict) or not isinstance(doc.get("vms"), list):
        raise OwnersError(f'{where}: expected {{"vms": [...]}} at the top')
    by_uuid: dict[str, tuple[int, VmOwner]] = {}
    by_name: dict[str, tuple[int, VmOwner]] = {}
    for i, entry in enumerate(doc["vms"]):
        at = f"{where}: vms[{i}]"
        if not isinstance(entry, dict):
            raise OwnersError(f"{at} is not an object")
        values = {}
        for key in ("vm_uuid", "vm_name", "tenant_id", "project_id", "cost_center"):
            value = entry.get(key)
            value = "" if value is None else value  # missing or null: not given
            if not isinstance(value, str):
                raise OwnersError(f"{at}.{key} must be a string, got {value!r}")
            values[key] = value.strip()
        if not values["vm_uuid"] and not values["vm_name"]:
            raise OwnersError(f"{at} names no VM: give vm_uuid and/or vm_name")
        if not values["tenant_id"]:
            raise OwnersError(f"{at} has no tenant_id: leave a VM out of the file to mark it as unowned")
        owner = VmOwner(values["tenant_id"], values["project_id"], values["cost_center"])
        for index, key in ((by_uuid, values["vm_uuid"].lower()), (by_name, values["vm_name"])):
            if not key:
                continue
            if key in index:
                raise OwnersError(f"{at} names VM {key!r} again (first in vms[{index[key][0]}]): keep one entry")
            index[key] = (i, owner)
    return VmOwners({k: v for k, (_, v) in by_uuid.items()}, {k: v for k, (_, v) in by_name.items()})


class _OwnersFile:
    """The owner mapping file, re-read when it changes; the last good mapping on failure."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.owners = VmOwners({}, {})
        self._signature: tuple | None = None

    def refresh(self) -> CommandError | None:
        if self.path is None:
            return None
        try:
            st = self.path.stat()
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            if signature == self._signature:
                return None
            doc = orjson.loads(self.path.read_bytes())
        except OSError as exc:
            self._signature = None
            return CommandError("owners_unreadable", f"cannot read the VM owner file {self.path} ({exc}): check "
                                                     "vgpu_owners; the last good mapping stays in use")
        except orjson.JSONDecodeError as exc:
            self._signature = None
            return CommandError("owners_invalid", f"{self.path} is not JSON ({exc}): fix it; the last good mapping "
                                                  "stays in use")
        try:
            self.owners = parse_vm_owners(doc, str(self.path))
        except OwnersError as exc:
            self._signature = None
            return CommandError("owners_invalid", f"{exc}; the last good mapping stays in use")
        self._signature = signature
        return None


def run_command(command: list[str], timeout_s: float, what: str) -> str:
    """Run ``command`` and return its stdout as text. Raises CommandError (``command_missing``,
    ``command_failed``, ``timeout``) naming the command and what to check. On timeout the
    command's whole process group is killed."""
    shown = shlex.join(command)
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError as exc:
        raise CommandError("command_missing", f"`{shown}`: {command[0]} not found: check the command setting and "
                                              f"that {what} is installed on this host") from exc
    except OSError as exc:
        raise CommandError("command_failed", f"`{shown}` cannot be started ({exc}): check the command setting "
                                             "and its permissions") from exc
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (a wedged driver): left behind, the next tick tries again
        raise CommandError("timeout", f"`{shown}` did not finish within {timeout_s:g} s: check the NVIDIA driver "
                                      "and GPUs (nvidia-smi hangs on a wedged GPU)") from None
    if proc.returncode != 0:
        said = (err or out).decode("utf-8", errors="replace").strip().splitlines()
        tail = " / ".join(said[-3:]) if said else "no message"
        raise CommandError("command_failed", f"`{shown}` exited with status {proc.returncode} ({tail}): check "
                                             f"{what}")
    return out.decode("utf-8", errors="replace")


class VgpuProducer:
    """One hypervisor host's vGPUs, read with nvidia-smi at every grid tick into ``vgpu.jsonl``."""

    source = "vgpu"

    def __init__(self, host: str, vgpu_command: list[str], gpus_command: list[str], owners_path: Path | None,
                 interval_s: float, metrics: ProducerMetrics, timeout_s: float = 10.0) -> None:
        if not host:
            raise ValueError("host is empty: name the hypervisor host these vGPUs run on")
        if not vgpu_command or not gpus_command:
            raise ValueError("vgpu_command and gpus_command must each name a program (e.g. nvidia-smi vgpu -q)")
        self.host, self.interval_s, self.timeout_s = host, interval_s, timeout_s
        self.vgpu_command, self.gpus_command = list(vgpu_command), list(gpus_command)
        self.metrics = metrics
        self._owners = _OwnersFile(owners_path)
        self._last_problems: set[str] = set()

    def run(self, sink: LineSink, stop: threading.Event, now_ms: Callable[[], int]) -> None:
        """Read the host's vGPUs at each grid tick until ``stop`` is set. Never raises for a failed read."""
        poll_on_grid(lambda tick_ms: self.poll(sink, tick_ms, now_ms), self.interval_s, now_ms, stop)

    def poll(self, sink: LineSink, tick_ms: int, now_ms: Callable[[], int]) -> bool:
        """One snapshot stamped ``tick_ms``: put and flush its line. Returns whether it was published."""
        problems: list[tuple[str, str]] = []
        try:
            records = self._read(self.vgpu_command, parse_vgpu_query, "the NVIDIA vGPU manager (host driver)")
            uuids = self._read(self.gpus_command, parse_gpu_uuids, "the NVIDIA driver")
        except CommandError as exc:
            self._report([(exc.reason, str(exc))])
            return False
        owner_problem = self._owners.refresh()
        if owner_problem is not None:
            problems.append((owner_problem.reason, str(owner_problem)))
        vgpus = []
        unknown: set[str] = set()
        for record in records:
            physical = uuids.get(record.bus_id)
            if physical is None:
                unknown.add(record.bus_id)
            vgpus.append(self._vgpu(record, physical or ""))
        for bus_id in sorted(unknown):
            problems.append(("unknown_gpu", f"GPU {bus_id} of `{shlex.join(self.vgpu_command)}` is not in "
                                            f"`{shlex.join(self.gpus_command)}`: its vGPUs are reported with an "
                                            "empty physical_gpu_uuid; check that both commands see the same GPUs"))
        line = {"observed_at": format_rfc3339(tick_ms), "host": self.host, "vgpus": vgpus}
        try:
            sink.put(FILE, line)
            sink.flush()
        except Exception as exc:  # the sink (the broker) failed: this tick is lost, the next one retries
            problems.append(("sink", f"vGPU snapshot of {self.host} at {line['observed_at']} not delivered "
                                     f"({type(exc).__name__}: {exc}): check the broker"))
            self._report(problems)
            return False
        self.metrics.sent(FILE)
        self.metrics.observed(tick_ms, now_ms())
        self._report(problems)
        return True

    def _read(self, command: list[str], parse: Callable, what: str):
        text = run_command(command, self.timeout_s, what)
        try:
            return parse(text)
        except NvidiaSmiError as exc:
            raise CommandError("bad_output", f"`{shlex.join(command)}` printed something that is not its "
                                             f"format ({exc}): check the command setting and {what}") from exc

    def _vgpu(self, record: VgpuRecord, physical_gpu_uuid: str) -> dict:
        owner = self._owners.owners.owner_of(record.vm_uuid, record.vm_name)
        return {"vgpu_uuid": record.vgpu_identity, "physical_gpu_uuid": physical_gpu_uuid,
                "profile": record.profile, "vm_uuid": record.vm_identity, "vm_name": record.vm_name,
                "owner": {"tenant_id": owner.tenant_id, "project_id": owner.project_id,
                          "cost_center": owner.cost_center}}

    def _report(self, problems: list[tuple[str, str]]) -> None:
        """Count every problem; say each on stderr once while it lasts, and say when all are gone."""
        messages = set()
        for reason, message in problems:
            self.metrics.error(reason)
            messages.add(message)
            if message not in self._last_problems:
                _say(f"vgpu: {message}")
        if not problems and self._last_problems:
            _say(f"vgpu: {self.host} read again without problems")
        self._last_problems = messages


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
