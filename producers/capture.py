"""``gpuledger ingest DIR``: publish a capture (``gpuledger-capture/1``) to the source topics.

Each line is checked at the boundary (``capture_lines``: shape, required fields, bounds);
its event time must be plausible (``domain.bounds``: not before 2000, at most
``max_future_ms`` ahead of the publisher's clock) and each record it makes must fit one Kafka
record (``Publisher.max_record_bytes``). A line that fails any of it goes to the dead-letter
topic with its file, line number and reason, and the rest of the capture goes on; a
reference document (inventory, quotas, rate cards, credits) likewise. Event
time = ``observed_at`` = the Kafka timestamp. Watch BOOKMARK events are sent to every
partition of the watch topic (they carry no object, and every partition's watermark must
move); after the last watch line an end-of-capture bookmark at the last ``observed_at``
does the same, as a live watch's periodic bookmark would.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ValidationError

from gpuledger.domain.bounds import EARLIEST_EVENT_MS, check_event_time_ms
from gpuledger.domain.capacity_plan import parse_throughput
from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.endpoints import parse_endpoints
from gpuledger.domain.inventory import parse_inventory
from gpuledger.domain.pricing import parse_credits
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.suspense import parse_assignments
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms
from gpuledger.bus.port import Publisher
from gpuledger.producers.capture_lines import (DcgmLine, Line, ModelScrapeLine, PodResourcesLine, RequestLine, VgpuLine,
                                               WatchLine)
from gpuledger.schemas import Codec, CodecError
from gpuledger.bus.topics import Topics

__all__ = ["CAPTURE_FORMAT", "LINE_FILES", "CaptureError", "IngestSummary", "LinePublisher", "ingest_capture"]

CAPTURE_FORMAT = "gpuledger-capture/1"
_RAW_LIMIT = 64 * 1024


REFERENCE_KINDS = ("inventory", "quotas", "ratecards", "credits", "endpoints", "suspense", "throughput")


def reference_time(kind: str, raw: bytes) -> int:
    """Validate a reference document; returns its event time (its earliest validity).
    Raises ValueError naming what is wrong."""
    try:
        doc = orjson.loads(raw)
        if kind == "inventory":
            return min((g.valid_from_ms for g in parse_inventory(doc).gpus), default=0)
        if kind == "ratecards":
            return min((c.valid_from_ms for c in parse_ratecards(doc)), default=0)
        if kind == "quotas":
            return min((q.valid_from_ms for q in parse_quotas(doc)), default=0)
        if kind == "endpoints":
            return min((e.valid_from_ms for e in parse_endpoints(doc)), default=0)
        if kind == "throughput":
            return min((e.valid_from_ms for e in parse_throughput(doc)), default=0)
        if kind == "suspense":  # the newest decision: the list only grows
            return max((a.at_ms for a in parse_assignments(doc)), default=0)
        # a credit belongs to a period: YYYY-MM
        return min((parse_rfc3339_ms(f"{c.period}-01T00:00:00Z") for c in parse_credits(doc)), default=0)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{kind}.json is not JSON: {exc}") from exc
    except ValueError:
        raise
    except (KeyError, TypeError, AttributeError, ArithmeticError) as exc:  # a shape the parser did not expect
        raise ValueError(f"{kind}.json does not have the documented shape: {exc!r}") from exc


class CaptureError(ValueError):
    """The directory is not a capture at all (missing or wrong manifest)."""


@dataclass
class IngestSummary:
    records: Counter = field(default_factory=Counter)  # topic -> records
    rejected: Counter = field(default_factory=Counter)  # file -> lines
    first_rejections: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = ["topic                                   records"]
        lines += [f"{t:<40}{n:>8}" for t, n in sorted(self.records.items())]
        total_rejected = sum(self.rejected.values())
        lines.append(f"rejected (dead-lettered) lines: {total_rejected}")
        lines += [f"  {r}" for r in self.first_rejections[:10]]
        return "\n".join(lines)


LINE_FILES = ("k8s-watch.jsonl", "podresources.jsonl", "dcgm.jsonl", "vgpu.jsonl", "requests.jsonl",
              "model-metrics.jsonl")


DEFAULT_MAX_FUTURE_MS = 86_400_000  # Settings.max_future_skew_s


class _Ingest:
    """Each line: validate (shape, then plausibility), build its records, encode them and check
    their size; only a line that passes all of it is published, whole. Anything else is a dead
    letter with its place and reason; only the broker failing (PublishError) stops the run."""

    def __init__(self, capture: Path, publisher: Publisher, topics: Topics, cluster_id: str,
                 wall_ms: Callable[[], int], progress: Callable[[str], None] = lambda _: None,
                 max_future_ms: int = DEFAULT_MAX_FUTURE_MS) -> None:
        self.capture, self.pub, self.topics, self.cluster = capture, publisher, topics, cluster_id
        self.wall_ms, self.progress, self.max_future_ms = wall_ms, progress, max_future_ms
        self.summary = IngestSummary()
        self.last_watch_ms: int | None = None
        self.last_rejection: str | None = None  # the reason the latest dead letter was given
        self.codecs = {t.schema: Codec(t.schema) for t in topics.all() if t.schema}

    def publish(self, where: str, records: list[tuple], raw: bytes) -> bool:
        """Encode ``records`` ((spec, key, record, ts_ms, partition) each) and publish them all,
        or dead-letter ``raw`` when one does not fit its schema or the size limit."""
        encoded = []
        limit = self.pub.max_record_bytes
        for spec, key, record, ts, partition in records:
            record.setdefault("ingested_at_ms", self.wall_ms())
            record.setdefault("cluster_id", self.cluster)
            try:
                value = self.codecs[spec.schema].encode(record)
            except CodecError as exc:
                self.reject(where, str(exc), raw)
                return False
            size = len(key.encode()) + len(value)
            if size > limit:
                self.reject(where, f"the record is {size} bytes, over the limit of {limit} bytes per Kafka record "
                                   "(the broker's message.max.bytes): split the source's output or leave it out", raw)
                return False
            encoded.append((spec.name, key.encode(), value, ts, partition))
        for topic, key, value, ts, partition in encoded:
            self.pub.publish(topic, key, value, ts, partition)
            self.summary.records[topic] += 1
        return True

    def reject(self, where: str, reason: str, raw: bytes) -> None:
        self.last_rejection = reason
        self.summary.rejected[where.rsplit(":", 1)[0]] += 1
        if len(self.summary.first_rejections) < 20:
            self.summary.first_rejections.append(f"{where}: {reason}")
        self.pub.publish(self.topics.dead_letter.name, where.encode(), self.codecs["dead_letter"].encode({
            "ingested_at_ms": self.wall_ms(), "stage": "ingest", "source": where, "reason": reason,
            "raw": raw[:_RAW_LIMIT]}), self.wall_ms())
        self.summary.records[self.topics.dead_letter.name] += 1

    def lines(self, name: str) -> Iterator[tuple[str, object, bytes]]:
        """(where, the parsed JSON, the raw line) of each non-blank line; lines that are not
        JSON are dead-lettered here."""
        path = self.capture / name
        if not path.exists():
            return
        size, done, last_report = path.stat().st_size or 1, 0, time.monotonic()
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                done += len(raw)
                if time.monotonic() - last_report > 1.0:
                    self.progress(f"ingest: {name} line {number} ({100 * done / size:.0f}%)")
                    last_report = time.monotonic()
                if not raw.strip():
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    self.reject(f"{name}:{number}", f"not JSON: {exc}", raw)
                    continue
                yield f"{name}:{number}", obj, raw
        self.progress(f"ingest: {name} done")

    # -- files ---------------------------------------------------------------------
    def documents(self) -> None:
        for kind in REFERENCE_KINDS:
            path = self.capture / f"{kind}.json"
            if not path.exists():
                continue
            raw = path.read_bytes()
            try:
                ts = reference_time(kind, raw)
            except ValueError as exc:
                self.reject(f"{kind}.json:1", str(exc), raw)
                continue
            if ts and ts < EARLIEST_EVENT_MS:  # 0: valid from the beginning
                self.reject(f"{kind}.json:1", f"earliest validity {format_rfc3339(ts)} is before "
                                              f"{format_rfc3339(EARLIEST_EVENT_MS)}, the earliest plausible time", raw)
                continue
            self.document(kind, raw, ts, f"{kind}.json:1")

    def document(self, kind: str, raw: bytes, ts: int, where: str) -> bool:
        return self.publish(where, [(self.topics.reference, f"{self.cluster}/{kind}",
                                     {"observed_at_ms": ts, "kind": kind, "document_json": raw.decode()}, ts, None)], raw)

    # -- one line of each file (a capture's or a live producer's) -----------------------
    def put(self, name: str, obj: object, where: str, raw: bytes | None = None) -> None:
        """Validate one capture-format line of file ``name`` and publish it (or dead-letter it)."""
        model, records = self.handlers()[name]
        raw = _dumps(obj) if raw is None else raw
        try:
            line = model.model_validate(obj)
        except ValidationError as exc:
            self.reject(where, _first_error(exc), raw)
            return
        reason = check_event_time_ms(line.observed_at_ms, self.wall_ms(), self.max_future_ms)
        if reason is None and isinstance(line, RequestLine) and line.arrived_at is not None:
            reason = check_event_time_ms(line.arrived_at_ms(), self.wall_ms(), self.max_future_ms)
            reason = reason and f"arrived_at: {reason}"
        elif reason is not None:
            reason = f"observed_at: {reason}"
        if reason is not None:
            self.reject(where, reason, raw)
            return
        if self.publish(where, records(line), raw) and isinstance(line, WatchLine):
            ts = line.observed_at_ms
            self.last_watch_ms = ts if self.last_watch_ms is None else max(self.last_watch_ms, ts)

    def handlers(self) -> dict[str, tuple[type[Line], Callable[[Line], list[tuple]]]]:
        return {"k8s-watch.jsonl": (WatchLine, self.on_watch), "podresources.jsonl": (PodResourcesLine, self.on_podresources),
                "dcgm.jsonl": (DcgmLine, self.on_dcgm), "vgpu.jsonl": (VgpuLine, self.on_vgpu),
                "requests.jsonl": (RequestLine, self.on_request),
                "model-metrics.jsonl": (ModelScrapeLine, self.on_model_scrape)}

    def file(self, name: str) -> None:
        for where, obj, raw in self.lines(name):
            self.put(name, obj, where, raw)

    def watch(self) -> None:
        self.file("k8s-watch.jsonl")
        if self.last_watch_ms is not None:
            event = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
                "annotations": {"gpuledger.io/end-of-capture": "true"}}}}
            self.publish("k8s-watch.jsonl:end", self._watch_records(event, self.last_watch_ms), b"")

    def on_watch(self, line: WatchLine) -> list[tuple]:
        return self._watch_records(line.event, line.observed_at_ms)

    def _watch_records(self, event: dict, ts: int) -> list[tuple]:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        record = {"observed_at_ms": ts, "event_type": event["type"], "kind": str(obj.get("kind") or ""),
                  "uid": str(meta.get("uid") or ""), "namespace": str(meta.get("namespace") or ""),
                  "name": str(meta.get("name") or ""), "resource_version": str(meta.get("resourceVersion") or ""),
                  "object_json": _dumps(obj).decode()}
        spec = self.topics.k8s
        if event["type"] in ("BOOKMARK", "ERROR"):
            return [(spec, "watch-marker", dict(record), ts, p) for p in range(self.pub.partitions(spec.name))]
        return [(spec, record["uid"], record, ts, None)]

    def on_podresources(self, line: PodResourcesLine) -> list[tuple]:
        ts = line.observed_at_ms
        return [(self.topics.podresources, line.node, {"observed_at_ms": ts, "node": line.node,
                                                       "response_json": _dumps(line.response).decode()}, ts, None)]

    def on_dcgm(self, line: DcgmLine) -> list[tuple]:
        ts = line.observed_at_ms
        return [(self.topics.dcgm, line.node, {"observed_at_ms": ts, "node": line.node, "exposition": line.exposition},
                 ts, None)]

    def on_vgpu(self, line: VgpuLine) -> list[tuple]:
        ts = line.observed_at_ms
        vgpus = [{"vgpu_uuid": v.vgpu_uuid, "physical_gpu_uuid": v.physical_gpu_uuid, "profile": v.profile,
                  "vm_uuid": v.vm_uuid, "vm_name": v.vm_name, **v.owner.model_dump()} for v in line.vgpus]
        return [(self.topics.vgpu, line.host, {"observed_at_ms": ts, "host": line.host, "vgpus": vgpus}, ts, None)]

    def on_request(self, line: RequestLine) -> list[tuple]:
        ts = line.observed_at_ms
        record = line.model_dump(include={"endpoint_id", "model", "revision", "request_id", "tenant_id",
                                          "project_id", "prompt_tokens", "completion_tokens", "queue_s",
                                          "ttft_s", "e2e_s", "outcome"})
        return [(self.topics.requests, line.endpoint_id,
                 {"observed_at_ms": ts, "arrived_at_ms": line.arrived_at_ms(), **record}, ts, None)]

    def on_model_scrape(self, line: ModelScrapeLine) -> list[tuple]:
        ts = line.observed_at_ms
        record = line.model_dump(include={"endpoint_id", "runtime", "pod", "revision", "exposition"})
        return [(self.topics.model_metrics, line.endpoint_id, {"observed_at_ms": ts, **record}, ts, None)]


class LinePublisher(_Ingest):
    """Publishes single capture-format lines, as ingest does (for live producers)."""

    def __init__(self, publisher: Publisher, topics: Topics, cluster_id: str, wall_ms: Callable[[], int],
                 max_future_ms: int = DEFAULT_MAX_FUTURE_MS) -> None:
        super().__init__(Path("."), publisher, topics, cluster_id, wall_ms, max_future_ms=max_future_ms)


def _dumps(obj: object) -> bytes:
    """JSON of what a source said; integers beyond 64 bits (which orjson refuses) kept verbatim."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), default=repr).encode()


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "line"
    return f"{where}: {err.get('msg')}"


def ingest_capture(capture: Path, publisher: Publisher, topics: Topics, wall_ms: Callable[[], int],
                   progress: Callable[[str], None] = lambda _: None,
                   max_future_ms: int = DEFAULT_MAX_FUTURE_MS) -> IngestSummary:
    """Publish every file of the capture, then flush; malformed lines are dead-lettered."""
    manifest_path = capture / "manifest.json"
    try:
        manifest = orjson.loads(manifest_path.read_bytes())
    except FileNotFoundError as exc:
        raise CaptureError(f"{capture} has no manifest.json: is it a gpuledger capture directory?") from exc
    except orjson.JSONDecodeError as exc:
        raise CaptureError(f"{manifest_path} is not JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != CAPTURE_FORMAT or not manifest.get("cluster_id"):
        raise CaptureError(f"{manifest_path} must say format {CAPTURE_FORMAT!r} and name a cluster_id")
    job = _Ingest(capture, publisher, topics, str(manifest["cluster_id"]), wall_ms, progress, max_future_ms)
    job.documents()
    job.watch()
    for name in ("podresources.jsonl", "dcgm.jsonl", "vgpu.jsonl", "requests.jsonl", "model-metrics.jsonl"):
        job.file(name)
    publisher.flush()
    return job.summary


def load_reference(path: Path, kind: str, cluster_id: str, publisher: Publisher, topics: Topics,
                   wall_ms: Callable[[], int]) -> int:
    """Publish one reference document (rate cards, quotas, credits, inventory) on its own,
    as ingest would; a bad document is refused (CaptureError), not published."""
    if kind not in REFERENCE_KINDS:
        raise CaptureError(f"unknown reference kind {kind!r}: one of {', '.join(REFERENCE_KINDS)}")
    try:
        raw = path.read_bytes()
        ts = reference_time(kind, raw)
        if len(raw) > publisher.max_record_bytes - 1024:  # the record adds its cluster, kind and times
            raise ValueError(f"{len(raw)} bytes is over the limit of {publisher.max_record_bytes} bytes per Kafka "
                             "record (the broker's message.max.bytes)")
    except OSError as exc:
        raise CaptureError(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CaptureError(f"{path}: {exc}") from exc
    job = _Ingest(path.parent, publisher, topics, cluster_id, wall_ms, lambda _: None)
    if not job.document(kind, raw, ts, str(path)):
        raise CaptureError(f"{path}: {job.summary.first_rejections[-1]}")
    publisher.flush()
    return ts
