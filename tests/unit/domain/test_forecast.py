"""Peak-demand forecasting (domain/forecast.py, domain/capacity_plan.py, domain/demand_forecast.py):
no services, generated demand with a known weekly pattern and trend."""

from __future__ import annotations

import pytest
from forecast_demand import generated

from gpuledger.domain.capacity_plan import (ThroughputError, class_headroom, committed_by_hour, parse_throughput,
                                            required_service_gpus, throughput_in_force)
from gpuledger.domain.demand_forecast import ForecastInputs, build_forecast, forecast_rows
from gpuledger.domain.forecast import (MS_PER_DAY, MS_PER_HOUR, backtest, bucket_start_ms, daily_peaks, forecast_peaks,
                                       hourly_curve, peaks_by_bucket)
from gpuledger.domain.quota import Quota
from gpuledger.domain.timeutil import parse_rfc3339_ms

START = parse_rfc3339_ms("2026-08-03T00:00:00Z")  # a Monday


def test_eight_weeks_forecast_the_next_two_weeks_peak_within_ten_percent():
    hourly = generated(10)
    history, future = hourly[:8 * 168], hourly[8 * 168:]
    fc = forecast_peaks(daily_peaks(history), 14)
    assert fc.model.startswith("statsmodels") and len(fc.daily_peaks) == 14
    true_peak = max(future)
    assert abs(max(fc.daily_peaks) - true_peak) / true_peak < 0.10, (max(fc.daily_peaks), true_peak)
    # the weekly pattern is recovered, not just the level: weekends forecast below weekdays
    weekdays = [v for i, v in enumerate(fc.daily_peaks) if i % 7 < 5]
    weekends = [v for i, v in enumerate(fc.daily_peaks) if i % 7 >= 5]
    assert min(weekdays) > max(weekends)
    assert fc.backtest is not None and fc.backtest.holdout_days == 14
    assert fc.backtest.mape_daily_peak < 0.10 and abs(fc.backtest.peak_error_ratio) < 0.10


def test_a_wrong_model_would_miss_the_peak():
    """The trend matters: the history's own peak (a model without trend) is more than 5 % short."""
    hourly = generated(10)
    assert (max(hourly[8 * 168:]) - max(hourly[:8 * 168])) / max(hourly[8 * 168:]) > 0.05
    flat = forecast_peaks([50.0] * 20, 7)
    assert flat.model == "constant" and flat.daily_peaks == [50.0] * 7


def test_short_history_is_not_forecast_and_says_why():
    fc = forecast_peaks([1.0, 2.0, 3.0], 14)
    assert fc.model == "none" and fc.daily_peaks == [] and "at least 14" in fc.reason
    assert backtest([1.0] * 20, 14) is None  # 6 days left to fit: under two seasons


def test_curves_and_buckets():
    assert hourly_curve([(START, 2.0), (START + 2 * MS_PER_HOUR, 3.0), (START - MS_PER_HOUR, 9.0)],
                        START, START + 3 * MS_PER_HOUR) == [2.0, 0.0, 3.0]
    assert daily_peaks([7.0] + [1.0] * 23 + [5.0]) == [7.0, 5.0]  # 24-hour days counted back from the end
    assert daily_peaks([1.0] * 24 + [3.0] * 24) == [1.0, 3.0]
    wednesday = START + 2 * MS_PER_DAY + 5 * MS_PER_HOUR
    assert bucket_start_ms(wednesday, "week") == START
    assert bucket_start_ms(wednesday, "month") == parse_rfc3339_ms("2026-08-01T00:00:00Z")
    # 2026-08-30 (Sun) .. 2026-09-02 (Wed): two weeks, two months
    days = [1.0, 4.0, 2.0, 3.0]
    first = parse_rfc3339_ms("2026-08-30T00:00:00Z")
    assert peaks_by_bucket(days, first, MS_PER_DAY, "week") == [(first - 6 * MS_PER_DAY, 1.0, 1.0),
                                                                (first + MS_PER_DAY, 4.0, 3.0)]
    assert [p for _, p, _ in peaks_by_bucket(days, first, MS_PER_DAY, "month")] == [4.0, 3.0]


def test_required_gpus_by_hand():
    # 9,000 tokens/s at peak; 1,200 tokens/s per GPU at the SLO -> 7.5 GPUs of service;
    # reserves 12.5 % + 5 % -> 7.5 × 1.175 = 8.8125 -> 9 whole GPUs
    need = required_service_gpus(9000.0, 1200.0, 0.125, 0.05)
    assert need.service_gpus == pytest.approx(7.5)
    assert need.failure_reserve_gpus == pytest.approx(0.9375)
    assert need.maintenance_reserve_gpus == pytest.approx(0.375)
    assert need.required_gpus_exact == pytest.approx(8.8125)
    assert need.required_gpus == 9
    assert required_service_gpus(4800.0, 1200.0, 0.0, 0.0).required_gpus == 4  # whole: not rounded up to 5
    with pytest.raises(ValueError):
        required_service_gpus(1.0, 0.0, 0.0, 0.0)


THROUGHPUT = [{"gpu_class": "H100-80GB", "profile": "", "mode": "exclusive", "model": "llama",
               "sustainable_tokens_per_s_per_gpu": 1200, "slo": {"ttft_p95_s": 2.0},
               "validated_at": "2026-07-20T00:00:00Z", "validated_by": "perf", "failure_reserve_ratio": 0.125,
               "maintenance_reserve_ratio": 0.05, "valid_from": "2026-07-01T00:00:00Z"}]


def test_throughput_document_is_validated():
    (entry,) = parse_throughput(THROUGHPUT)
    assert entry.key == ("H100-80GB", "", "exclusive", "llama") and entry.slo == {"ttft_p95_s": 2.0}
    assert throughput_in_force([entry], entry.key, START) is entry
    assert throughput_in_force([entry], entry.key, parse_rfc3339_ms("2026-06-01T00:00:00Z")) is None
    for bad, why in [({"sustainable_tokens_per_s_per_gpu": 0}, "above 0"), ({"slo": {}}, "slo"),
                     ({"failure_reserve_ratio": -0.1}, "negative"), ({"mode": "shared"}, "mode"),
                     ({"model": ""}, "model"), ({"validated_at": None}, "validated_at")]:
        with pytest.raises(ThroughputError, match=why):
            parse_throughput([{**THROUGHPUT[0], **bad}])
    with pytest.raises(ThroughputError):
        parse_throughput({"not": "a list"})


def test_committed_and_headroom():
    quotas = [Quota("a", "H100-80GB", 8.0, START, START + 2 * MS_PER_HOUR), Quota("b", "H100-80GB", 4.0, START, None),
              Quota("a", "H100-80GB", 10.0, START + MS_PER_HOUR, None)]
    assert committed_by_hour(quotas, START, 3) == {"H100-80GB": [12.0, 14.0, 14.0]}
    h = class_headroom("H100-80GB", {"n1": 8, "n2": 8, "n3": 4}, 1.0, 12.5)
    assert (h.physical_gpus, h.failure_domain_gpus, h.headroom_gpus) == (20, 8, 20 - 12.5 - 8 - 1.0)


def test_the_document_forecasts_each_class_and_prices_the_service():
    hours = 8 * 168
    as_of = START + 56 * MS_PER_DAY
    alloc = generated(8)
    points = {("H100-80GB", "", "exclusive", "", "allocated_gpus"): [(START + i * MS_PER_HOUR, v)
                                                                     for i, v in enumerate(alloc)],
              ("H100-80GB", "1g.10gb", "mig", "", "allocated_gpus"): [(START + i * MS_PER_HOUR, 1.0)
                                                                       for i in range(hours)],
              ("H100-80GB", "", "exclusive", "", "unavailable_gpus"): [(START + 5 * MS_PER_HOUR, 2.0)],
              ("H100-80GB", "", "exclusive", "llama", "productive_tokens_per_s"): [
                  (START + i * MS_PER_HOUR, 9000.0 if i % 24 == 14 else 3000.0) for i in range(hours)]}
    doc = build_forecast(ForecastInputs(as_of, 56 * 24, 14, points, [Quota("a", "H100-80GB", 30.0, START, None)],
                                        parse_throughput(THROUGHPUT), {"H100-80GB": {"n1": 8, "n2": 8}}))
    by = {(e["mode"], e["profile"], e["measure"]): e for e in doc["series"]}
    total = by[("all", "", "allocated_gpus")]
    assert total["history_peak"] == pytest.approx(max(alloc) + 1.0)
    assert total["forecast"]["model"].startswith("statsmodels") and total["backtest"]["holdout_days"] == 14
    assert by[("all", "", "committed_gpus")]["forecast"]["peak"] == pytest.approx(30.0)
    assert by[("all", "", "unavailable_gpus")]["forecast"] is None
    (req,) = doc["required"]
    assert req["peak_tokens_per_s"] == pytest.approx(9000.0, rel=1e-3) and req["required_gpus"] == 9
    (head,) = doc["headroom"]
    assert head["physical_gpus"] == 16 and head["failure_domain_gpus"] == 8 and head["peak_unavailable_gpus"] == 2.0
    assert head["required_service_gpus"] == 9
    rows = forecast_rows(doc)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"actual", "forecast", "backtest", "plan"}
    weeks = [r for r in rows if r["measure"] == "allocated_gpus" and r["mode"] == "all" and r["bucket"] == "week"]
    assert len([r for r in weeks if r["kind"] == "actual"]) == 8 and len([r for r in weeks if r["kind"] == "forecast"]) == 2
