"""The forecast document (``gpuledger-forecast/1``): demand curves per capacity class, peak
forecasts, required service GPUs and class headroom, from hourly demand series.

A series is one measure of one capacity class: (GPU class, MIG or vGPU profile, mode, model),
hourly values over the history ``[from_ms, as_of_ms)``. Measures and units:

- ``allocated_gpus``: GPU-equivalents held (allocation), mean over the hour;
- ``active_gpus``: GPU-equivalents × SM-active ratio (utilization);
- ``committed_gpus``: guaranteed quota in force (class totals only: quotas are per class);
- ``unmet_gpus``: GPU-equivalents of pods waiting for capacity (queue pressure);
- ``unavailable_gpus``: GPU-equivalents out of service (maintenance; not forecast);
- ``productive_tokens_per_s``: successful requests' tokens per second, per model.

Class totals (profile ``""``, mode ``"all"``, no model) add up the class's GPU measures over
its profiles and modes. Rows (``forecast_rows``) are the same figures in long form for CSV
and the ``capacity_forecasts`` table: (class, measure, bucket, bucket start, kind, peak, mean)
with kind ``actual``, ``forecast``, ``backtest`` or ``plan``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gpuledger.domain.capacity_plan import (ServiceThroughput, class_headroom, committed_by_hour, required_service_gpus,
                                            throughput_in_force)
from gpuledger.domain.forecast import (MS_PER_DAY, MS_PER_HOUR, daily_peaks, forecast_peaks, hourly_curve,
                                       peaks_by_bucket)
from gpuledger.domain.quota import Quota
from gpuledger.domain.timeutil import format_rfc3339

__all__ = ["FORECAST_FORMAT", "GPU_MEASURES", "ROW_COLUMNS", "ForecastInputs", "build_forecast", "forecast_rows"]

FORECAST_FORMAT = "gpuledger-forecast/1"
GPU_MEASURES = ("allocated_gpus", "active_gpus", "unmet_gpus", "unavailable_gpus")
NOT_FORECAST = ("unavailable_gpus",)
ROW_COLUMNS = ["gpu_class", "profile", "mode", "model", "measure", "bucket", "bucket_start", "kind", "peak", "mean"]

Key = tuple[str, str, str, str]  # gpu_class, profile, mode, model


@dataclass(frozen=True)
class ForecastInputs:
    """What the store says. ``points``: (class, profile, mode, model, measure) -> [(hour_ms,
    value)]; ``gpus_by_node``: class -> node -> GPUs in the inventory at ``as_of_ms``."""

    as_of_ms: int
    history_hours: int
    horizon_days: int
    points: dict[tuple[str, str, str, str, str], list[tuple[int, float]]]
    quotas: list[Quota]
    throughput: list[ServiceThroughput]
    gpus_by_node: dict[str, dict[str, int]]

    @property
    def from_ms(self) -> int:
        return self.as_of_ms - self.history_hours * MS_PER_HOUR


def _series(inp: ForecastInputs) -> dict[tuple[Key, str], list[float]]:
    """Dense hourly series, with the class totals and the committed quota added."""
    hours = inp.history_hours
    out: dict[tuple[Key, str], list[float]] = {}
    for (gpu_class, profile, mode, model, measure), pts in sorted(inp.points.items()):
        curve = hourly_curve(pts, inp.from_ms, inp.as_of_ms)
        out[((gpu_class, profile, mode, model), measure)] = curve
        if measure in GPU_MEASURES:
            total = out.setdefault(((gpu_class, "", "all", ""), measure), [0.0] * hours)
            for i, v in enumerate(curve):
                total[i] += v
    for gpu_class, curve in committed_by_hour(inp.quotas, inp.from_ms, hours).items():
        out[((gpu_class, "", "all", ""), "committed_gpus")] = curve
    return dict(sorted(out.items()))


def _buckets(values: list[float], from_ms: int, step_ms: int) -> dict[str, list[dict]]:
    return {b: [{"start": format_rfc3339(s), "start_ms": s, "peak": peak, "mean": mean}
                for s, peak, mean in peaks_by_bucket(values, from_ms, step_ms, b)] for b in ("week", "month")}


def _one(inp: ForecastInputs, key: Key, measure: str, hourly: list[float]) -> dict:
    peaks = daily_peaks(hourly)
    entry = {"gpu_class": key[0], "profile": key[1], "mode": key[2], "model": key[3], "measure": measure,
             "history_peak": max(hourly, default=0.0), "history_mean": sum(hourly) / len(hourly) if hourly else 0.0,
             "curves": _buckets(hourly, inp.from_ms, MS_PER_HOUR), "forecast": None, "backtest": None}
    if measure in NOT_FORECAST:
        return entry
    fc = forecast_peaks(peaks, inp.horizon_days)
    entry["forecast"] = {"model": fc.model, "reason": fc.reason,
                         "peak": max(fc.daily_peaks) if fc.daily_peaks else None,
                         "daily_peaks": fc.daily_peaks,
                         **({k: [{"start": b["start"], "start_ms": b["start_ms"], "peak": b["peak"]} for b in v]
                             for k, v in _buckets(fc.daily_peaks, inp.as_of_ms, MS_PER_DAY).items()}
                            if fc.daily_peaks else {"week": [], "month": []})}
    entry["backtest"] = asdict(fc.backtest) if fc.backtest else None
    return entry


def _peak(entry: dict) -> tuple[float, str]:
    fc = entry["forecast"]
    if fc and fc["peak"] is not None:
        return fc["peak"], "forecast"
    return entry["history_peak"], f"history (no forecast: {fc['reason'] if fc else 'not forecast'})"


def build_forecast(inp: ForecastInputs) -> dict:
    series = [_one(inp, key, measure, hourly) for (key, measure), hourly in _series(inp).items()]
    required, missing = [], []
    for e in series:
        if e["measure"] != "productive_tokens_per_s":
            continue
        key = (e["gpu_class"], e["profile"], e["mode"], e["model"])
        doc = throughput_in_force(inp.throughput, key, inp.as_of_ms)
        if doc is None:
            missing.append(dict(zip(("gpu_class", "profile", "mode", "model"), key)))
            continue
        peak, basis = _peak(e)
        need = required_service_gpus(peak, doc.sustainable_tokens_per_s_per_gpu, doc.failure_reserve_ratio,
                                     doc.maintenance_reserve_ratio)
        required.append({**dict(zip(("gpu_class", "profile", "mode", "model"), key)), "basis": basis,
                         "slo": doc.slo, "validated_at": format_rfc3339(doc.validated_at_ms),
                         "failure_reserve_ratio": doc.failure_reserve_ratio,
                         "maintenance_reserve_ratio": doc.maintenance_reserve_ratio, **asdict(need)})
    totals = {(e["gpu_class"], e["measure"]): e for e in series if e["mode"] == "all"}
    headroom = []
    for gpu_class in sorted(set(inp.gpus_by_node) | {c for c, m in totals if m == "allocated_gpus"}):
        allocated = totals.get((gpu_class, "allocated_gpus"))
        unavailable = totals.get((gpu_class, "unavailable_gpus"))
        peak, basis = _peak(allocated) if allocated else (0.0, "no allocation")
        h = class_headroom(gpu_class, inp.gpus_by_node.get(gpu_class, {}),
                           unavailable["history_peak"] if unavailable else 0.0, peak)
        headroom.append({**asdict(h), "basis": basis,
                         "required_service_gpus": sum(r["required_gpus"] for r in required if r["gpu_class"] == gpu_class)})
    return {"format": FORECAST_FORMAT, "as_of": format_rfc3339(inp.as_of_ms), "as_of_ms": inp.as_of_ms,
            "history": {"from": format_rfc3339(inp.from_ms), "to": format_rfc3339(inp.as_of_ms),
                        "hours": inp.history_hours, "days": inp.history_hours / 24},
            "horizon": {"from": format_rfc3339(inp.as_of_ms),
                        "to": format_rfc3339(inp.as_of_ms + inp.horizon_days * MS_PER_DAY), "days": inp.horizon_days},
            "series": series, "required": required, "missing_throughput": missing, "headroom": headroom}


def forecast_rows(doc: dict) -> list[dict]:
    """The document in long form (``ROW_COLUMNS``; ``bucket_start`` in epoch ms)."""
    rows = []

    def row(e: dict, measure: str, bucket: str, start_ms: int, kind: str, peak: float, mean: float | None) -> None:
        rows.append({"gpu_class": e["gpu_class"], "profile": e.get("profile", ""), "mode": e.get("mode", "all"),
                     "model": e.get("model", ""), "measure": measure, "bucket": bucket, "bucket_start": start_ms,
                     "kind": kind, "peak": float(peak), "mean": None if mean is None else float(mean)})

    as_of = doc["as_of_ms"]
    for e in doc["series"]:
        for bucket in ("week", "month"):
            for b in e["curves"][bucket]:
                row(e, e["measure"], bucket, b["start_ms"], "actual", b["peak"], b["mean"])
            for b in (e["forecast"] or {}).get(bucket, []):
                row(e, e["measure"], bucket, b["start_ms"], "forecast", b["peak"], None)
        bt = e["backtest"]
        if bt:
            if bt["mape_daily_peak"] is not None:
                row(e, f"{e['measure']}:mape_daily_peak", "horizon", as_of, "backtest", bt["mape_daily_peak"], None)
            if bt["peak_error_ratio"] is not None:
                row(e, f"{e['measure']}:peak_error_ratio", "horizon", as_of, "backtest", bt["peak_error_ratio"], None)
    for r in doc["required"]:
        for measure in ("service_gpus", "failure_reserve_gpus", "maintenance_reserve_gpus", "required_gpus"):
            row(r, measure, "horizon", as_of, "plan", r[measure], None)
    for h in doc["headroom"]:
        for measure in ("physical_gpus", "failure_domain_gpus", "peak_unavailable_gpus", "peak_allocated_gpus",
                        "headroom_gpus", "required_service_gpus"):
            row(h, measure, "horizon", as_of, "plan", h[measure], None)
    return rows
