"""Cutting and extending capture files for arrival-order and bad-input tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import orjson

from gpuledger.domain.timeutil import parse_rfc3339_ms


def split_lines(src: Path, dst_keep: Path, dst_late: Path, name: str, late: Callable[[dict], bool]) -> int:
    """Copy capture ``src`` to ``dst_keep`` without the lines of ``name`` that ``late`` picks;
    those go to a capture of their own at ``dst_late``. Returns how many moved."""
    shutil.copytree(src, dst_keep)
    dst_late.mkdir(parents=True)
    shutil.copy(src / "manifest.json", dst_late / "manifest.json")
    kept, moved = [], []
    for raw in (src / name).read_bytes().splitlines():
        (moved if late(orjson.loads(raw)) else kept).append(raw)
    (dst_keep / name).write_bytes(b"\n".join(kept) + b"\n")
    (dst_late / name).write_bytes(b"\n".join(moved) + b"\n")
    return len(moved)


def at_or_after(node: str, iso: str) -> Callable[[dict], bool]:
    t = parse_rfc3339_ms(iso)
    return lambda line: line["node"] == node and parse_rfc3339_ms(line["observed_at"]) >= t


def append_lines(capture: Path, name: str, lines: list[str]) -> None:
    with (capture / name).open("a") as fh:
        for line in lines:
            fh.write(line + "\n")
