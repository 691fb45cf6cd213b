"""dcgm-exporter ``/metrics`` (Prometheus text) -> per-GPU device samples.

Units normalized here, once: framebuffer MiB -> bytes, energy mJ -> J, ``*_UTIL`` percent
-> ratio. DCGM's "not supported" sentinels (~9.22e18 and friends) and NaN are dropped, and
so is a value no GPU can report (``_PLAUSIBLE``: framebuffer bytes outside [0, 2^50), power
outside [0, 10^5) W, negative energy): counted as a skipped series, never stored.
MIG-instance series carry the parent's UUID plus ``GPU_I_ID`` (no MIG UUID): they become
samples of that GPU instance (``gpu_instance_id``), never of the parent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["DcgmParse", "DeviceSample", "parse_exposition"]

_SENTINEL_MIN = 9.0e15  # int64 blanks: 0x7ffffffffffffff0 + 0..15 (blank, not found, not supported, ...)
_FP64_BLANK = 2.0 ** 47  # fp64 blanks: 140737488355328.0 + 0..15 (SM active, power)
_FIELDS = {
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_active",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}


@dataclass(frozen=True)
class DeviceSample:
    gpu_uuid: str
    gpu_instance_id: int | None
    sm_active_ratio: float | None
    fb_used_bytes: int | None
    power_w: float | None
    energy_j: float | None
    model: str = ""  # modelName label: "GRID A100-40C" inside a vGPU guest
    per_pod: tuple = ()  # ((namespace, pod, SM-active ratio), ...) when sharing pods' series differ


@dataclass(frozen=True)
class DcgmParse:
    samples: list[DeviceSample]
    series_parsed: int
    skipped: dict[str, int]  # reason -> series count; parsed + skipped = every series of the scrape


_series_cache: dict[str, tuple] = {}  # series text (name and label set) -> _series
_labels_cache: dict[str, tuple] = {}  # label set text -> _identity
_CACHE_MAX = 200_000
_REPEATED = "repeated series of the same device (one per sharing pod)"
_RATIO_FIELDS = {"sm_active": 1.0, "gr_active": 1.0, "gpu_util_pct": 0.01}
# field -> [low, high) of a value a GPU can report, in the exporter's units
_PLAUSIBLE = {"fb_used_mib": (0.0, 2.0 ** 30, "implausible framebuffer used (not in [0, 2^50) bytes)"),
              "power_w": (0.0, 1e5, "implausible power (not in [0, 100000) W)"),
              "energy_mj": (0.0, math.inf, "implausible energy (negative or not finite)")}
_ANY = (-math.inf, math.inf, "")


def _identity(name: str, label_text: str) -> tuple:
    """(device key, modelName, skip reason, (namespace, pod) or None) of a label set, parsed by
    prometheus_client's text parser once per distinct label text (shared by a device's fields)."""
    found = _labels_cache.get(label_text)
    if found is None:
        families = list(text_string_to_metric_families(f"{name}{label_text} 0\n"))
        labels = families[0].samples[0].labels
        uuid = labels.get("UUID") or labels.get("gpu_uuid") or ""
        instance = labels.get("GPU_I_ID")
        if not uuid:
            found = (None, "", "no UUID label", None)
        elif instance is not None and not instance.isdigit():
            found = (None, "", "GPU_I_ID not a number", None)
        else:
            pod = (labels["namespace"], labels["pod"]) if labels.get("pod") and labels.get("namespace") else None
            found = ((uuid, None if instance is None else int(instance)), labels.get("modelName", ""), "", pod)
        if len(_labels_cache) >= _CACHE_MAX:
            _labels_cache.clear()
        _labels_cache[label_text] = found
    return found


def _series(series: str, brace: int) -> tuple:
    """(field, device key, modelName, skip reason, (namespace, pod) or None, plausible low,
    high, implausible reason, ratio field?) of one series, cached: series repeat verbatim
    scrape after scrape. A series without labels is ``name{}``."""
    name, label_text = series[:brace], series[brace:]
    field = _FIELDS.get(name)
    if field is None:
        found = (None, None, "", f"not an attribution field: {name}", None, 0.0, 0.0, "", False)
    else:
        low, high, implausible = _PLAUSIBLE.get(field, _ANY)
        found = (field, *_identity(name, label_text), low, high, implausible, field in _RATIO_FIELDS)
    if len(_series_cache) >= _CACHE_MAX:
        _series_cache.clear()
    _series_cache[series] = found
    return found


def _per_pod(by_field: dict[str, dict[tuple, float]]) -> tuple:
    """Per-pod evidence: the sharing pods' series disagree (identical repeats carry none)."""
    for field_name, scale in _RATIO_FIELDS.items():
        values = by_field.get(field_name)
        if values:
            if len(set(values.values())) < 2:
                return ()
            return tuple((ns, pod, min(max(v * scale, 0.0), 1.0)) for (ns, pod), v in sorted(values.items()))
    return ()


def _value(rest: str, line: str) -> float:
    parts = rest.split()
    if not parts:
        raise ValueError(f"sample without a value: {line[:120]!r}")
    return float(parts[0])


def parse_exposition(text: str) -> DcgmParse:
    """Parse one scrape. Raises ValueError if the text is not Prometheus exposition."""
    per_gpu: dict[tuple[str, int | None], dict[str, float]] = {}
    models: dict[tuple[str, int | None], str] = {}
    pod_values: dict[tuple, dict[str, dict[tuple, float]]] = {}  # key -> field -> pod -> value
    skipped: dict[str, int] = {}
    parsed = 0
    cache, isnan = _series_cache, math.isnan
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            if close < brace:
                raise ValueError(f"unterminated label set: {line[:120]!r}")
            series, rest = line[:close + 1], line[close + 1:]
        else:
            name, _, rest = line.partition(" ")
            series, brace = name + "{}", len(name)
        info = cache.get(series)
        if info is None:
            if series[:brace] in _FIELDS:  # the value is read before the labels, as on a hit
                _value(rest, line)
            info = _series(series, brace)
        field, key, model, reason, pod, low, high, implausible, ratio = info
        if field is not None:
            try:
                value = float(rest)  # " 0.5": one token, as split() would give it
            except ValueError:
                value = _value(rest, line)
            if not reason:
                if isnan(value) or abs(value) >= _SENTINEL_MIN or _FP64_BLANK <= value < _FP64_BLANK + 16:
                    reason = "DCGM blank sentinel"
                elif not low <= value < high:
                    reason = implausible
                else:
                    if pod is not None and ratio:
                        pod_values.setdefault(key, {}).setdefault(field, {})[pod] = value
                    fields = per_gpu.get(key)
                    if fields is None:
                        fields = per_gpu[key] = {}
                        models[key] = model
                    if field not in fields:
                        fields[field] = value
                        parsed += 1
                        continue
                    reason = _REPEATED  # time-slicing: the exporter repeats a GPU's series per sharing pod
        skipped[reason] = skipped.get(reason, 0) + 1
    samples = []
    for key in sorted(per_gpu, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        f = per_gpu[key]
        ratio = f.get("sm_active", f.get("gr_active"))
        if ratio is None and "gpu_util_pct" in f:
            ratio = f["gpu_util_pct"] / 100.0
        samples.append(DeviceSample(
            gpu_uuid=key[0], gpu_instance_id=key[1],
            sm_active_ratio=None if ratio is None else min(max(ratio, 0.0), 1.0),
            fb_used_bytes=None if "fb_used_mib" not in f else int(f["fb_used_mib"] * 1024 * 1024),
            power_w=f.get("power_w"),
            energy_j=None if "energy_mj" not in f else f["energy_mj"] / 1000.0,
            model=models[key], per_pod=_per_pod(pod_values.get(key, {})),
        ))
    return DcgmParse(samples, parsed, skipped)
