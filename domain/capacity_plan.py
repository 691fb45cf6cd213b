"""Capacity planning from a forecast: the GPUs a model service needs, and a class's headroom.

Required service GPUs = forecast peak productive throughput ÷ the validated sustainable
throughput of one GPU at the target SLO × (1 + failure reserve + maintenance reserve).
The sustainable throughput is a reference document (``throughput.json``, published like the
rate cards and quotas), one entry per capacity class (GPU class, MIG or vGPU profile, mode)
and model, effective-dated ``[valid_from, valid_to)``::

    [{"gpu_class": "H100-80GB", "profile": "", "mode": "exclusive", "model": "llama-3.1-70b-instruct",
      "sustainable_tokens_per_s_per_gpu": 2400, "slo": {"ttft_p95_s": 2.0},
      "validated_at": "2026-09-20T00:00:00Z", "validated_by": "perf-team",
      "failure_reserve_ratio": 0.125, "maintenance_reserve_ratio": 0.05,
      "valid_from": "2026-09-01T00:00:00Z", "valid_to": null}]

Throughput is successful requests' input + output tokens per second. A class's headroom
sets its physical GPUs against the forecast peak held, the failure-domain reserve (the GPUs
of its largest node: losing one node must not stop service) and the most GPUs seen
unavailable (maintenance)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuledger.domain.bounds import check_rate
from gpuledger.domain.quota import Quota, quota_in_force
from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["ClassHeadroom", "RequiredGpus", "ServiceThroughput", "ThroughputError", "class_headroom",
           "committed_by_hour", "parse_throughput", "required_service_gpus", "throughput_in_force"]

_EPSILON = 1e-9  # a required count within this of a whole number is that number (float noise)


class ThroughputError(ValueError):
    """throughput.json does not have the documented shape."""


@dataclass(frozen=True)
class ServiceThroughput:
    gpu_class: str
    profile: str
    mode: str
    model: str
    sustainable_tokens_per_s_per_gpu: float
    slo: dict
    validated_at_ms: int
    validated_by: str
    failure_reserve_ratio: float
    maintenance_reserve_ratio: float
    valid_from_ms: int
    valid_to_ms: int | None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.gpu_class, self.profile, self.mode, self.model


def _number(entry: dict, name: str, default: float | None = None) -> float:
    value = entry.get(name, default)
    if value is None:
        raise ValueError(f"{name} is required")
    reason = check_rate(value, name)
    if reason:
        raise ValueError(reason)
    return float(value)


def parse_throughput(doc: list) -> list[ServiceThroughput]:
    if not isinstance(doc, list):
        raise ThroughputError("throughput must be a JSON list")
    out = []
    for i, e in enumerate(doc):
        try:
            if not isinstance(e, dict):
                raise ValueError("an entry is a JSON object")
            for name in ("gpu_class", "model"):
                if not isinstance(e.get(name), str) or not e[name]:
                    raise ValueError(f"{name} must be a non-empty string")
            tokens = _number(e, "sustainable_tokens_per_s_per_gpu")
            if tokens <= 0:
                raise ValueError("sustainable_tokens_per_s_per_gpu must be above 0")
            slo = e.get("slo")
            if not isinstance(slo, dict) or not slo or any(check_rate(v, f"slo.{k}") for k, v in slo.items()):
                raise ValueError("slo must name the targets the throughput was validated at, e.g. {\"ttft_p95_s\": 2}")
            mode = str(e.get("mode") or "exclusive")
            if mode not in ("exclusive", "mig", "timeslice", "vgpu"):
                raise ValueError(f"mode {mode!r} is not one of exclusive, mig, timeslice, vgpu")
            out.append(ServiceThroughput(
                e["gpu_class"], str(e.get("profile") or ""), mode, e["model"], tokens,
                {str(k): float(v) for k, v in slo.items()}, parse_rfc3339_ms(e["validated_at"]),
                str(e.get("validated_by") or ""), _number(e, "failure_reserve_ratio", 0.0),
                _number(e, "maintenance_reserve_ratio", 0.0), parse_rfc3339_ms(e["valid_from"]),
                parse_rfc3339_ms(e["valid_to"]) if e.get("valid_to") else None))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ThroughputError(f"throughput[{i}]: {exc}; needs gpu_class, model, sustainable_tokens_per_s_per_gpu, "
                                  "slo, validated_at, valid_from") from exc
    return out


def throughput_in_force(entries: list[ServiceThroughput], key: tuple[str, str, str, str],
                        t_ms: int) -> ServiceThroughput | None:
    """The entry for (class, profile, mode, model) in force at ``t_ms``: the latest to start."""
    current = [e for e in entries if e.key == key and e.valid_from_ms <= t_ms
               and (e.valid_to_ms is None or t_ms < e.valid_to_ms)]
    return max(current, key=lambda e: e.valid_from_ms) if current else None


@dataclass(frozen=True)
class RequiredGpus:
    peak_tokens_per_s: float
    sustainable_tokens_per_s_per_gpu: float
    service_gpus: float  # peak / sustainable: what serving the peak takes
    failure_reserve_gpus: float
    maintenance_reserve_gpus: float
    required_gpus_exact: float  # service × (1 + failure + maintenance reserve)
    required_gpus: int  # whole GPUs: the exact figure rounded up


def required_service_gpus(peak_tokens_per_s: float, sustainable_tokens_per_s_per_gpu: float,
                          failure_reserve_ratio: float, maintenance_reserve_ratio: float) -> RequiredGpus:
    if sustainable_tokens_per_s_per_gpu <= 0:
        raise ValueError("the sustainable throughput per GPU must be above 0")
    service = peak_tokens_per_s / sustainable_tokens_per_s_per_gpu
    failure, maintenance = service * failure_reserve_ratio, service * maintenance_reserve_ratio
    exact = service * (1 + failure_reserve_ratio + maintenance_reserve_ratio)
    return RequiredGpus(peak_tokens_per_s, sustainable_tokens_per_s_per_gpu, service, failure, maintenance, exact,
                        max(0, math.ceil(exact - _EPSILON)))


def committed_by_hour(quotas: list[Quota], from_ms: int, hours: int, hour_ms: int = 3_600_000) -> dict[str, list[float]]:
    """Per GPU class, the guaranteed GPUs of all tenants' quotas in force at each hour's start."""
    by_key: dict[tuple[str, str], list[Quota]] = {}
    for q in quotas:
        by_key.setdefault((q.tenant_id, q.gpu_class), []).append(q)
    out: dict[str, list[float]] = {}
    for (_, gpu_class), mine in sorted(by_key.items()):
        series = out.setdefault(gpu_class, [0.0] * hours)
        for i in range(hours):
            q = quota_in_force(mine, from_ms + i * hour_ms)
            series[i] += q.guaranteed_gpus if q else 0.0
    return out


@dataclass(frozen=True)
class ClassHeadroom:
    gpu_class: str
    physical_gpus: int  # in the inventory at the as-of time
    failure_domain_gpus: int  # the class's GPUs on its largest node
    peak_unavailable_gpus: float  # the most GPU-equivalents unavailable in an hour of the history
    peak_allocated_gpus: float  # forecast peak held over the horizon (the history's when there is no forecast)
    headroom_gpus: float  # physical - peak held - failure-domain reserve - maintenance


def class_headroom(gpu_class: str, gpus_by_node: dict[str, int], peak_unavailable_gpus: float,
                   peak_allocated_gpus: float) -> ClassHeadroom:
    physical = sum(gpus_by_node.values())
    domain = max(gpus_by_node.values(), default=0)
    return ClassHeadroom(gpu_class, physical, domain, peak_unavailable_gpus, peak_allocated_gpus,
                         physical - peak_allocated_gpus - domain - peak_unavailable_gpus)
