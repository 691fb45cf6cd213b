"""``gpuledger ingest DIR``: publish a capture (``gpuledger-capture/1``) to the source topics.

Each line is checked at the boundary (pydantic); a malformed line goes to the dead-letter
topic with its file, line number and reason, and the rest of the capture goes on. Event
time = ``observed_at`` = the Kafka timestamp. Watch BOOKMARK events are sent to every
partition of the watch topic (they carry no object, and every partition's watermark must
move); after the last watch line an end-of-capture bookmark at the last ``observed_at``
does the same, as a live watch's periodic bookmark would.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpuledger.domain.inventory import InventoryError, parse_inventory
from gpuledger.domain.podresources import PodResourcesError, device_holders
from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.pricing import parse_credits
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.producers.base import Publisher
from gpuledger.schemas import Codec
from gpuledger.streams.topics import Topics

__all__ = ["CAPTURE_FORMAT", "LINE_FILES", "CaptureError", "IngestSummary", "LinePublisher", "ingest_capture"]

CAPTURE_FORMAT = "gpuledger-capture/1"
_RAW_LIMIT = 64 * 1024


REFERENCE_KINDS = ("inventory", "quotas", "ratecards", "credits")


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
        # a credit belongs to a period: YYYY-MM
        return min((parse_rfc3339_ms(f"{c.period}-01T00:00:00Z") for c in parse_credits(doc)), default=0)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{kind}.json is not JSON: {exc}") from exc
    except (InventoryError, KeyError, TypeError) as exc:
        raise ValueError(str(exc)) from exc


class CaptureError(ValueError):
    """The directory is not a capture at all (missing or wrong manifest)."""


class _Line(BaseModel):
    model_config = ConfigDict(extra="allow")
    observed_at: str

    @field_validator("observed_at")
    @classmethod
    def _rfc3339(cls, v: str) -> str:
        parse_rfc3339_ms(v)
        return v


class _WatchLine(_Line):
    event: dict

    @field_validator("event")
    @classmethod
    def _event(cls, v: dict) -> dict:
        if v.get("type") not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
            raise ValueError(f"event.type must be ADDED/MODIFIED/DELETED/BOOKMARK/ERROR, got {v.get('type')!r}")
        if not isinstance(v.get("object"), dict):
            raise ValueError("event.object must be an object")
        return v


class _PodResourcesLine(_Line):
    node: str
    response: dict

    @field_validator("response")
    @classmethod
    def _response(cls, v: dict) -> dict:
        try:
            device_holders(v)
        except PodResourcesError as exc:
            raise ValueError(str(exc)) from exc
        return v


class _DcgmLine(_Line):
    node: str
    exposition: str


class _VgpuOwner(BaseModel):
    tenant_id: str = ""
    project_id: str = ""
    cost_center: str = ""


class _Vgpu(BaseModel):
    model_config = ConfigDict(extra="allow")
    vgpu_uuid: str
    physical_gpu_uuid: str
    profile: str
    vm_uuid: str
    vm_name: str = ""
    owner: _VgpuOwner = _VgpuOwner()


class _VgpuLine(_Line):
    host: str
    vgpus: list[_Vgpu]


class _RequestLine(_Line):
    endpoint_id: str
    model: str
    revision: str = ""
    request_id: str
    tenant_id: str
    project_id: str = ""
    arrived_at: str
    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    queue_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    outcome: str

    @field_validator("outcome")
    @classmethod
    def _outcome(cls, v: str) -> str:
        if v not in ("success", "error", "cancelled"):
            raise ValueError(f"outcome must be success, error or cancelled, got {v!r}")
        return v


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


LINE_FILES = ("k8s-watch.jsonl", "podresources.jsonl", "dcgm.jsonl", "vgpu.jsonl", "requests.jsonl")


class _Ingest:
    def __init__(self, capture: Path, publisher: Publisher, topics: Topics, cluster_id: str,
                 wall_ms: Callable[[], int], progress: Callable[[str], None] = lambda _: None) -> None:
        self.capture, self.pub, self.topics, self.cluster = capture, publisher, topics, cluster_id
        self.wall_ms, self.progress = wall_ms, progress
        self.summary = IngestSummary()
        self.last_watch_ms: int | None = None
        self.codecs = {t.schema: Codec(t.schema) for t in topics.all()}

    def emit(self, spec, key: str, record: dict, ts_ms: int, partition: int | None = None) -> None:
        record.setdefault("ingested_at_ms", self.wall_ms())
        record.setdefault("cluster_id", self.cluster)
        self.pub.publish(spec.name, key.encode(), self.codecs[spec.schema].encode(record), ts_ms, partition)
        self.summary.records[spec.name] += 1

    def reject(self, where: str, reason: str, raw: bytes) -> None:
        self.summary.rejected[where.rsplit(":", 1)[0]] += 1
        if len(self.summary.first_rejections) < 20:
            self.summary.first_rejections.append(f"{where}: {reason}")
        self.pub.publish(self.topics.dead_letter.name, where.encode(), self.codecs["dead_letter"].encode({
            "ingested_at_ms": self.wall_ms(), "stage": "ingest", "source": where, "reason": reason,
            "raw": raw[:_RAW_LIMIT]}), self.wall_ms())
        self.summary.records[self.topics.dead_letter.name] += 1

    def lines(self, name: str, model: type[_Line]) -> Iterator[tuple[int, _Line]]:
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
                    yield number, model.model_validate(orjson.loads(raw))
                except orjson.JSONDecodeError as exc:
                    self.reject(f"{name}:{number}", f"not JSON: {exc}", raw)
                except ValidationError as exc:
                    self.reject(f"{name}:{number}", _first_error(exc), raw)
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
            self.document(kind, raw, ts)

    def document(self, kind: str, raw: bytes, ts: int) -> None:
        self.emit(self.topics.reference, f"{self.cluster}/{kind}",
                  {"observed_at_ms": ts, "kind": kind, "document_json": raw.decode()}, ts)

    # -- one line of each file (a capture's or a live producer's) -----------------------
    def put(self, name: str, obj: dict, where: str) -> None:
        """Validate one capture-format line of file ``name`` and publish it (or dead-letter it)."""
        model, handler = self.handlers()[name]
        try:
            line = model.model_validate(obj)
        except ValidationError as exc:
            self.reject(where, _first_error(exc), orjson.dumps(obj))
            return
        handler(where, line)

    def handlers(self) -> dict:
        return {"k8s-watch.jsonl": (_WatchLine, self.on_watch), "podresources.jsonl": (_PodResourcesLine, self.on_podresources),
                "dcgm.jsonl": (_DcgmLine, self.on_dcgm), "vgpu.jsonl": (_VgpuLine, self.on_vgpu),
                "requests.jsonl": (_RequestLine, self.on_request)}

    def file(self, name: str) -> None:
        model, handler = self.handlers()[name]
        for number, line in self.lines(name, model):
            handler(f"{name}:{number}", line)

    def watch(self) -> None:
        self.file("k8s-watch.jsonl")
        if self.last_watch_ms is not None:
            self._watch_event(self.topics.k8s, {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
                "annotations": {"gpuledger.io/end-of-capture": "true"}}}}, self.last_watch_ms)

    def on_watch(self, where: str, line: _WatchLine) -> None:
        ts = parse_rfc3339_ms(line.observed_at)
        self.last_watch_ms = ts if self.last_watch_ms is None else max(self.last_watch_ms, ts)
        meta = (line.event.get("object") or {}).get("metadata") or {}
        if line.event["type"] not in ("BOOKMARK", "ERROR") and not meta.get("uid"):
            # nothing to key it by, and nothing the fold could attribute it to
            self.reject(where, f"{line.event['type']} event without metadata.uid", orjson.dumps(line.event))
            return
        self._watch_event(self.topics.k8s, line.event, ts)

    def _watch_event(self, spec, event: dict, ts: int) -> None:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        record = {"observed_at_ms": ts, "event_type": event["type"], "kind": str(obj.get("kind") or ""),
                  "uid": str(meta.get("uid") or ""), "namespace": str(meta.get("namespace") or ""),
                  "name": str(meta.get("name") or ""), "resource_version": str(meta.get("resourceVersion") or ""),
                  "object_json": orjson.dumps(obj).decode()}
        if event["type"] in ("BOOKMARK", "ERROR"):
            for p in range(self.pub.partitions(spec.name)):
                self.emit(spec, "watch-marker", dict(record), ts, partition=p)
        else:
            self.emit(spec, record["uid"], record, ts)

    def on_podresources(self, where: str, line: _PodResourcesLine) -> None:
        ts = parse_rfc3339_ms(line.observed_at)
        self.emit(self.topics.podresources, line.node, {"observed_at_ms": ts, "node": line.node,
                                                          "response_json": orjson.dumps(line.response).decode()}, ts)

    def on_dcgm(self, where: str, line: _DcgmLine) -> None:
        ts = parse_rfc3339_ms(line.observed_at)
        self.emit(self.topics.dcgm, line.node, {"observed_at_ms": ts, "node": line.node, "exposition": line.exposition}, ts)

    def on_vgpu(self, where: str, line: _VgpuLine) -> None:
        ts = parse_rfc3339_ms(line.observed_at)
        vgpus = [{"vgpu_uuid": v.vgpu_uuid, "physical_gpu_uuid": v.physical_gpu_uuid, "profile": v.profile,
                  "vm_uuid": v.vm_uuid, "vm_name": v.vm_name, **v.owner.model_dump()} for v in line.vgpus]
        self.emit(self.topics.vgpu, line.host, {"observed_at_ms": ts, "host": line.host, "vgpus": vgpus}, ts)

    def on_request(self, where: str, line: _RequestLine) -> None:
        ts = parse_rfc3339_ms(line.observed_at)
        try:
            arrived = parse_rfc3339_ms(line.arrived_at)
        except ValueError as exc:
            self.reject(where, f"arrived_at: {exc}", line.model_dump_json().encode())
            return
        record = line.model_dump(include={"endpoint_id", "model", "revision", "request_id", "tenant_id",
                                          "project_id", "prompt_tokens", "completion_tokens", "queue_s",
                                          "ttft_s", "e2e_s", "outcome"})
        self.emit(self.topics.requests, line.endpoint_id, {"observed_at_ms": ts, "arrived_at_ms": arrived, **record}, ts)


class LinePublisher(_Ingest):
    """Publishes single capture-format lines, as ingest does (for live producers)."""

    def __init__(self, publisher: Publisher, topics: Topics, cluster_id: str, wall_ms: Callable[[], int]) -> None:
        super().__init__(Path("."), publisher, topics, cluster_id, wall_ms)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "line"
    return f"{where}: {err.get('msg')}"


def ingest_capture(capture: Path, publisher: Publisher, topics: Topics, wall_ms: Callable[[], int],
                   progress: Callable[[str], None] = lambda _: None) -> IngestSummary:
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
    job = _Ingest(capture, publisher, topics, str(manifest["cluster_id"]), wall_ms, progress)
    job.documents()
    job.watch()
    for name in ("podresources.jsonl", "dcgm.jsonl", "vgpu.jsonl", "requests.jsonl"):
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
    except OSError as exc:
        raise CaptureError(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise CaptureError(f"{path}: {exc}") from exc
    job = _Ingest(path.parent, publisher, topics, cluster_id, wall_ms, lambda _: None)
    job.document(kind, raw, ts)
    publisher.flush()
    return ts
