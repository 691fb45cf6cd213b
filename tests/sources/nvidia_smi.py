"""A stand-in ``nvidia-smi`` program for tests: an executable shell script in a directory.

It answers ``nvidia-smi vgpu -q`` with the file ``vgpu-q.txt`` beside it and
``nvidia-smi --query-gpu=...`` with ``query-gpu.csv``; the test rewrites those files to change
what the "host" says. ``fail(status, message)`` makes every call print the message on stderr and
exit with that status; ``hang(seconds)`` makes it sleep first (in a child process, as a stuck
driver call would). Each call's arguments are appended to ``calls``.
"""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["NvidiaSmiScript"]

_SCRIPT = """#!/bin/sh
here=$(dirname "$0")
echo "$*" >> "$here/calls"
if [ -f "$here/sleep" ]; then sleep "$(cat "$here/sleep")"; fi
if [ -f "$here/exit" ]; then cat "$here/stderr" >&2; exit "$(cat "$here/exit")"; fi
case "$1" in
  vgpu) cat "$here/vgpu-q.txt" ;;
  --query-gpu=*) cat "$here/query-gpu.csv" ;;
  *) echo "nvidia-smi stand-in: unsupported arguments: $*" >&2; exit 2 ;;
esac
"""


class NvidiaSmiScript:
    def __init__(self, directory: Path, vgpu_q: str = "", query_gpu: str = "") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.path = directory / "nvidia-smi"
        self.path.write_text(_SCRIPT)
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.set_vgpu_q(vgpu_q)
        self.set_query_gpu(query_gpu)

    @property
    def vgpu_command(self) -> list[str]:
        return [str(self.path), "vgpu", "-q"]

    @property
    def gpus_command(self) -> list[str]:
        return [str(self.path), "--query-gpu=pci.bus_id,uuid", "--format=csv,noheader"]

    def set_vgpu_q(self, text: str) -> None:
        _replace(self.directory / "vgpu-q.txt", text)

    def set_query_gpu(self, text: str) -> None:
        _replace(self.directory / "query-gpu.csv", text)

    def fail(self, status: int, message: str) -> None:
        _replace(self.directory / "stderr", message + "\n")
        _replace(self.directory / "exit", str(status))

    def hang(self, seconds: float) -> None:
        _replace(self.directory / "sleep", f"{seconds:g}")

    def recover(self) -> None:
        for name in ("exit", "sleep"):
            (self.directory / name).unlink(missing_ok=True)

    @property
    def calls(self) -> list[str]:
        path = self.directory / "calls"
        return path.read_text().splitlines() if path.exists() else []


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
