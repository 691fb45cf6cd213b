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


def insert_lines(capture: Path, name: str, lines: list[str]) -> list[int]:
    """Insert ``lines`` in the middle of file ``name``; returns their line numbers (1-based)."""
    old = (capture / name).read_text().splitlines()
    at = len(old) // 2
    (capture / name).write_text("\n".join(old[:at] + lines + old[at:]) + "\n")
    return list(range(at + 1, at + 1 + len(lines)))


def _first(capture: Path, name: str) -> dict:
    return orjson.loads((capture / name).read_bytes().split(b"\n", 1)[0])


def bad_input(capture: Path) -> tuple[dict[str, list[tuple[str, str]]], dict[str, tuple[bytes, str]]]:
    """Lines that once stopped ``ingest`` (and a few implausible ones), each a copy of a good
    line of the capture with one thing broken: ({file: [(line, cause the dead letter names)]},
    {reference file: (document, cause)})."""
    watch = next(orjson.loads(x) for x in (capture / "k8s-watch.jsonl").read_bytes().splitlines()
                 if orjson.loads(x)["event"]["type"] != "BOOKMARK")
    pr, dcgm, req = (_first(capture, n) for n in ("podresources.jsonl", "dcgm.jsonl", "requests.jsonl"))
    obj = watch["event"]["object"]

    def pod(containers) -> dict:
        return {**pr, "response": {"podResources": [{"name": "p", "namespace": "n", "containers": containers}]}}

    def dumps(x: dict) -> str:
        return orjson.dumps(x).decode()

    lines = {
        "k8s-watch.jsonl": [
            (dumps({**watch, "event": {**watch["event"], "object": {**obj, "metadata": "xyz"}}}),
             "metadata must be an object"),
            (dumps({**watch, "event": {**watch["event"], "object": {**obj, "metadata": ["xyz"]}}}),
             "metadata must be an object")],
        "podresources.jsonl": [
            (dumps(pod("xyz")), "containers must be a list"),
            (dumps(pod([{"name": "c", "devices": [7]}])), "devices[0] must be an object"),
            (dumps(pod([{"name": "c", "devices": [{"resourceName": "nvidia.com/gpu", "deviceIds": 5}]}])),
             "deviceIds must be a list"),
            (dumps({**pr, "observed_at": "1969-12-31T23:00:00Z"}), "before 2000-01-01T00:00:00Z"),
            (dumps({**pr, "observed_at": "2099-01-01T00:00:00Z"}), "max_future_skew_s"),
        ],
        "requests.jsonl": [
            (dumps({**req, "request_id": "huge", "prompt_tokens": 2**63}), "2^31 - 1"),
            (dumps({**req, "request_id": "minus", "completion_tokens": -1}), "negative"),
        ],
        "dcgm.jsonl": [
            (dumps({**dcgm, "exposition": "# padding\n" * 110_000 + dcgm["exposition"]}),
             "over the limit of 1000000 bytes"),
        ],
    }
    documents = {"ratecards.json": (b'["x"]', "ratecards[0] must be an object"),
                 "inventory.json": (b'{"gpus": ["x"]}', "gpus[0] must be an object")}
    return lines, documents


def spoil(capture: Path) -> dict[str, str]:
    """Put ``bad_input`` into ``capture`` (lines in the middle of their files, documents in
    place of the good ones); returns {dead-letter source (file:line): cause}."""
    lines, documents = bad_input(capture)
    expected = {}
    for name, bad in lines.items():
        for number, (_, cause) in zip(insert_lines(capture, name, [x for x, _ in bad]), bad):
            expected[f"{name}:{number}"] = cause
    for name, (doc, cause) in documents.items():
        (capture / name).write_bytes(doc)
        expected[f"{name}:1"] = cause
    return expected


def without_documents(capture: Path, keep_in: Path | None = None) -> dict[str, Path]:
    """The capture ``spoil`` leaves behind, had it held only its good lines: the reference
    documents ``spoil`` replaces are moved to ``keep_in`` (to be loaded on their own), or
    removed. Returns {kind: where it was kept}."""
    kept = {}
    for name in bad_input(capture)[1]:
        if keep_in is not None and (capture / name).exists():
            keep_in.mkdir(parents=True, exist_ok=True)
            kept[name.removesuffix(".json")] = shutil.move(capture / name, keep_in / name)
        (capture / name).unlink(missing_ok=True)
    return kept


VGPU_OPTIONAL = ("vm_uuid", "vm_name")
OWNER_OPTIONAL = ("project_id", "cost_center")
REQUEST_OPTIONAL = ("model", "revision", "project_id", "arrived_at", "queue_s", "ttft_s", "e2e_s")


def _rewrite(capture: Path, name: str, change: Callable[[dict], dict]) -> None:
    lines = [change(orjson.loads(x)) for x in (capture / name).read_bytes().splitlines() if x.strip()]
    (capture / name).write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def optional_fields(capture: Path, how: str) -> None:
    """Make every optional identity field of the vGPU snapshots and request events ``null``
    (how="null") or leave it out (how="absent")."""
    def unset(obj: dict, keys: tuple[str, ...]) -> dict:
        return {k: v for k, v in obj.items() if k not in keys} if how == "absent" else {**obj, **dict.fromkeys(keys)}

    def vgpu_line(line: dict) -> dict:
        return {**line, "vgpus": [{**unset(v, VGPU_OPTIONAL), "owner": unset(v["owner"], OWNER_OPTIONAL)}
                                  for v in line["vgpus"]]}

    _rewrite(capture, "vgpu.jsonl", vgpu_line)
    _rewrite(capture, "requests.jsonl", lambda line: unset(line, REQUEST_OPTIONAL))
