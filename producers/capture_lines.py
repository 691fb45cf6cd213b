"""The lines of a capture's JSONL files, checked at the boundary (pydantic).

Required (capture format): ``observed_at``, the source's own key (``node``, ``host``,
``endpoint_id``, ``request_id``, a watch object's ``metadata.uid``), ``tenant_id`` where a
record names an owner, and a request's token counts and ``outcome``. Every other identity or
descriptive field may be missing or ``null``: text becomes ``""``, a latency stays unknown
(``None``). Shapes and plausibility bounds that need no clock are checked here; the event
time's bounds need the publisher's clock and are checked where lines are published.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator

from gpuledger.domain.bounds import check_latency_s, check_token_count
from gpuledger.domain.podresources import PodResourcesError, device_holders
from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["DcgmLine", "Line", "ModelScrapeLine", "PodResourcesLine", "RequestLine", "VgpuLine", "WatchLine"]

WATCH_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")


def _empty_if_null(value: object) -> object:
    return "" if value is None else value


# An optional identity or descriptive field: missing or null is "".
OptionalText = Annotated[str, BeforeValidator(_empty_if_null)]


class Line(BaseModel):
    model_config = ConfigDict(extra="allow")
    observed_at: str

    @field_validator("observed_at")
    @classmethod
    def _rfc3339(cls, v: str) -> str:
        parse_rfc3339_ms(v)
        return v

    @property
    def observed_at_ms(self) -> int:
        return parse_rfc3339_ms(self.observed_at)


_JSON_TYPES = {str: "string", list: "list", int: "number", float: "number", bool: "boolean"}


def _object_or_missing(obj: dict, key: str, where: str) -> None:
    if obj.get(key) is not None and not isinstance(obj[key], dict):
        raise ValueError(f"{where}.{key} must be an object, got a JSON {_JSON_TYPES.get(type(obj[key]), 'value')}")


class WatchLine(Line):
    event: dict

    @field_validator("event")
    @classmethod
    def _event(cls, v: dict) -> dict:
        if v.get("type") not in WATCH_TYPES:
            raise ValueError(f"event.type must be ADDED/MODIFIED/DELETED/BOOKMARK/ERROR, got {v.get('type')!r}")
        obj = v.get("object")
        if not isinstance(obj, dict):
            raise ValueError("event.object must be an object")
        _object_or_missing(obj, "metadata", "event.object")
        meta = obj.get("metadata") or {}
        for key in ("labels", "annotations"):
            _object_or_missing(meta, key, "event.object.metadata")
        if v["type"] not in ("BOOKMARK", "ERROR") and not meta.get("uid"):
            # nothing to key it by, and nothing the fold could attribute it to
            raise ValueError(f"{v['type']} event without metadata.uid")
        if meta.get("uid") is not None and not isinstance(meta["uid"], str):
            raise ValueError(f"event.object.metadata.uid must be a string, got {meta['uid']!r}")
        return v


class PodResourcesLine(Line):
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


class DcgmLine(Line):
    node: str
    exposition: str


class ModelScrapeLine(Line):
    """One model server's ``/metrics`` (vLLM, Triton, NIM), verbatim, with the endpoint it serves;
    the pod scraped and the revision it serves are optional (the revision may come from labels)."""

    endpoint_id: str
    runtime: OptionalText = ""
    pod: OptionalText = ""
    revision: OptionalText = ""
    exposition: str

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, v: str) -> str:
        if v not in ("", "vllm", "triton", "nim"):
            raise ValueError(f"runtime must be vllm, triton or nim, got {v!r}")
        return v


class VgpuOwner(BaseModel):
    tenant_id: OptionalText = ""  # no tenant: the VM has no owner (reported unattributed)
    project_id: OptionalText = ""
    cost_center: OptionalText = ""


class Vgpu(BaseModel):
    model_config = ConfigDict(extra="allow")
    vgpu_uuid: str
    physical_gpu_uuid: str
    profile: str
    vm_uuid: OptionalText = ""
    vm_name: OptionalText = ""
    owner: Annotated[VgpuOwner, BeforeValidator(lambda v: {} if v is None else v)] = VgpuOwner()


class VgpuLine(Line):
    host: str
    vgpus: list[Vgpu]


class RequestLine(Line):
    endpoint_id: str
    model: OptionalText = ""
    revision: OptionalText = ""
    request_id: str
    tenant_id: str
    project_id: OptionalText = ""
    arrived_at: str | None = None  # unknown: taken as observed_at - e2e_s, else observed_at
    prompt_tokens: int
    completion_tokens: int
    queue_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    outcome: str

    @field_validator("prompt_tokens", "completion_tokens")
    @classmethod
    def _tokens(cls, v: int, info) -> int:
        reason = check_token_count(v, info.field_name)
        if reason:
            raise ValueError(reason)
        return v

    @field_validator("queue_s", "ttft_s", "e2e_s")
    @classmethod
    def _latency(cls, v: float | None, info) -> float | None:
        reason = check_latency_s(v, info.field_name)
        if reason:
            raise ValueError(reason)
        return v

    @field_validator("arrived_at")
    @classmethod
    def _arrived(cls, v: str | None) -> str | None:
        if v is not None:
            parse_rfc3339_ms(v)
        return v

    @field_validator("outcome")
    @classmethod
    def _outcome(cls, v: str) -> str:
        if v not in ("success", "error", "cancelled"):
            raise ValueError(f"outcome must be success, error or cancelled, got {v!r}")
        return v

    def arrived_at_ms(self) -> int:
        if self.arrived_at is not None:
            return parse_rfc3339_ms(self.arrived_at)
        if self.e2e_s is not None:
            return self.observed_at_ms - int(round(self.e2e_s * 1000))
        return self.observed_at_ms
