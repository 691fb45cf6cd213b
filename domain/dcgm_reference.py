"""dcgm-exporter scrapes walked in Python: the reference of domain/_dcgm_walk.c (the walk over
a scrape's lines) and domain/_dcgm_samples.c (the samples of what it gathered), which
tests/unit/domain/test_dcgm_walk.py holds to the same results and errors, and the path of a
source tree without the build. What a series means comes from domain/dcgm.py's caches and
helpers, as it does for the walk in C."""

from __future__ import annotations

import math

from gpuledger.domain.dcgm import (_BLANK, _FP64_BLANK, _INT64_LIMIT, _REPEATED, _SENTINEL_MIN, DeviceSample, _lenient,
                                   _miss, _per_pod, _unterminated, _value)

__all__ = ["_samples", "_walk"]


def _walk(lines: list[str], cache: dict, from_old, per_gpu: dict, models: dict, pod_values: dict, health_out: dict,
          skipped: dict) -> int:
    """One scrape's lines into ``per_gpu`` (device key -> field -> value), ``models``,
    ``pod_values`` (key -> field -> pod -> value), ``health_out`` and ``skipped``; returns the
    series parsed. domain/_dcgm_walk.c does the same in C (tests hold the two to the same
    results); this one is its reference, and the path of a source tree without the build."""
    parsed = 0
    isfinite = math.isfinite
    sentinel, fp64_blank, fp64_blank_end = _SENTINEL_MIN, _FP64_BLANK, _FP64_BLANK + 16  # _blank, inlined
    for line in lines:
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            if close < brace:
                _unterminated(line)
            series, rest = line[:close + 1], line[close + 1:]
        else:
            name, _, rest = line.partition(" ")
            series, brace = name + "{}", len(name)
        info = cache.get(series)  # the young generation, inlined: nearly every line is found here
        if info is None:
            info = from_old(series)
        if info is None:
            info = _miss(series, brace, rest, line)
        field, key, model, reason, pod, low, high, implausible, ratio, health = info
        value = None
        if field is not None:
            try:
                value = float(rest)  # " 0.5": one token, as split() would give it
            except ValueError:
                value = _value(rest, line)
        if health is not None:
            hvalue = value
            if hvalue is None:
                try:
                    hvalue = float(rest)
                except ValueError:
                    hvalue = _lenient(rest)
            if hvalue is not None and hvalue >= 0 and hvalue < sentinel and not fp64_blank <= hvalue < fp64_blank_end:
                hfield, scale, integer, device = health
                scaled = hvalue * scale
                if isfinite(scaled) and not (integer and scaled >= _INT64_LIMIT):  # else a value no counter reaches
                    fields = health_out.get(device)
                    if fields is None:
                        fields = health_out[device] = {}
                    if hfield not in fields:
                        fields[hfield] = int(round(scaled)) if integer else scaled
        if field is not None:
            if not reason:
                if value != value or abs(value) >= sentinel or fp64_blank <= value < fp64_blank_end:
                    reason = _BLANK
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
    return parsed


def _samples(keys: list, per_gpu: dict, models: dict, pod_values: dict) -> list[DeviceSample]:
    """A sample per device key, in the order of ``keys``, from what the walk gathered (fields
    in the exporter's units -> the sample's). domain/_dcgm_walk.c ``samples`` does the same in
    C (the tests hold the two to the same samples); this one is its reference."""
    samples = []
    for key in keys:
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
            model=models[key], per_pod=_per_pod(pod_values[key]) if key in pod_values else ()))
    return samples
