"""Where a live producer puts what its source said: capture-format lines.

A live producer turns each observation into the line ``gpuledger ingest`` would read from a
capture file (``k8s-watch.jsonl``, ``dcgm.jsonl``, ...; see the capture format), and hands it
to a ``LineSink``. So a live producer publishes exactly what ingest would, and recording a
capture is just another sink:

- ``PublishSink`` validates and publishes each line as ingest does (bad ones dead-lettered);
- ``CaptureSink`` appends the lines to a capture directory (``gpuledger capture``);
- ``MemorySink`` keeps them in a list (the in-memory twin, for tests);
- ``TeeSink`` does both: a live run that also records its capture.

``flush`` is the commit point: a producer saves its resume position only after it returns.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import orjson

from gpuledger.bus.port import Publisher
from gpuledger.producers.capture import CAPTURE_FORMAT, DEFAULT_MAX_FUTURE_MS, LINE_FILES, LinePublisher
from gpuledger.bus.topics import Topics

__all__ = ["CaptureSink", "LineSink", "MemorySink", "PublishSink", "TeeSink"]


class LineSink(Protocol):
    def put(self, file: str, line: dict) -> str | None:
        """Take one capture-format line of ``file`` (one of LINE_FILES); the reason it was
        dead-lettered instead, when it was."""

    def reject(self, file: str, line: dict, reason: str) -> None:
        """Dead-letter a line its producer refused (say, a reporter not allowed to send it)."""

    def flush(self) -> None:
        """Return once every line taken so far is durable (published, or on disk)."""


def _check(file: str) -> None:
    if file not in LINE_FILES:
        raise ValueError(f"unknown capture file {file!r}: one of {', '.join(LINE_FILES)}")


class PublishSink:
    """Publishes lines to the source topics exactly as ``ingest`` does."""

    def __init__(self, publisher: Publisher, topics: Topics, cluster_id: str, wall_ms: Callable[[], int],
                 source: str = "live", max_future_ms: int = DEFAULT_MAX_FUTURE_MS) -> None:
        self._job = LinePublisher(publisher, topics, cluster_id, wall_ms, max_future_ms)
        self._source, self._pub, self._lock, self._n = source, publisher, threading.Lock(), 0

    def put(self, file: str, line: dict) -> str | None:
        _check(file)
        with self._lock:
            self._n += 1
            self._job.last_rejection = None
            self._job.put(file, line, f"{self._source}:{file}:{self._n}")
            return self._job.last_rejection

    def reject(self, file: str, line: dict, reason: str) -> None:
        _check(file)
        with self._lock:
            self._n += 1
            self._job.reject(f"{self._source}:{file}:{self._n}", reason, orjson.dumps(line))

    def flush(self) -> None:
        with self._lock:
            self._pub.flush()

    @property
    def summary(self):
        """What was published and dead-lettered so far (ingest's summary)."""
        return self._job.summary


class CaptureSink:
    """Appends lines to a capture directory (``manifest.json`` written first)."""

    def __init__(self, directory: Path, cluster_id: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        manifest = directory / "manifest.json"
        if manifest.exists():
            found = orjson.loads(manifest.read_bytes())
            if found.get("cluster_id") != cluster_id:
                raise ValueError(f"{manifest} is for cluster {found.get('cluster_id')!r}, not {cluster_id!r}: "
                                 "record into another directory")
        else:
            manifest.write_bytes(orjson.dumps({"format": CAPTURE_FORMAT, "cluster_id": cluster_id}))
        self._files: dict[str, object] = {}
        self._lock = threading.Lock()
        self.lines: Counter = Counter()

    def reject(self, file: str, line: dict, reason: str) -> None:
        """A refused line is not part of what the source said: not recorded."""
        _check(file)

    def put(self, file: str, line: dict) -> str | None:
        _check(file)
        with self._lock:
            fh = self._files.get(file)
            if fh is None:
                path = self.directory / file
                _drop_torn_tail(path)
                fh = self._files[file] = path.open("ab")
            fh.write(orjson.dumps(line) + b"\n")
            self.lines[file] += 1
        return None

    def flush(self) -> None:
        with self._lock:
            for fh in self._files.values():
                fh.flush()
                os.fsync(fh.fileno())

    def close(self) -> None:
        self.flush()
        with self._lock:
            for fh in self._files.values():
                fh.close()
            self._files.clear()


def _drop_torn_tail(path: Path) -> None:
    """A recorder killed mid-write leaves a last line without its newline: cut it off (the
    producer, resuming from its last commit, puts it again)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("r+b") as fh:
        end = fh.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:
            start = max(0, pos - 65536)
            fh.seek(start)
            chunk = fh.read(pos - start)
            if pos == end and chunk.endswith(b"\n"):
                return
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                fh.truncate(start + cut + 1)
                return
            pos = start
        fh.truncate(0)


@dataclass
class MemorySink:
    lines: list[tuple[str, dict]] = field(default_factory=list)
    flushed: int = 0
    rejected: list[tuple[str, dict, str]] = field(default_factory=list)

    def put(self, file: str, line: dict) -> str | None:
        _check(file)
        self.lines.append((file, line))
        return None

    def reject(self, file: str, line: dict, reason: str) -> None:
        _check(file)
        self.rejected.append((file, line, reason))

    def flush(self) -> None:
        self.flushed = len(self.lines)

    def of(self, file: str) -> list[dict]:
        return [line for f, line in self.lines if f == file]


class TeeSink:
    def __init__(self, *sinks: LineSink) -> None:
        self.sinks = sinks

    def put(self, file: str, line: dict) -> str | None:
        reasons = [s.put(file, line) for s in self.sinks]
        return next((r for r in reasons if r is not None), None)

    def reject(self, file: str, line: dict, reason: str) -> None:
        for s in self.sinks:
            s.reject(file, line, reason)

    def flush(self) -> None:
        for s in self.sinks:
            s.flush()
