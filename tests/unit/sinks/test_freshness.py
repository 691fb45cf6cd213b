"""The sink's freshness histogram: percentiles exact to its 100-ms buckets, fixed memory."""

import random

from gpuledger.sinks.freshness import BUCKET_MS, FreshnessHistogram


def test_percentiles_match_the_sorted_lags_to_the_bucket():
    rng = random.Random(5)
    lags = [rng.randint(0, 120_000) for _ in range(5_000)]
    h = FreshnessHistogram()
    stored = 1_800_000_000_000
    for i in range(0, len(lags), 700):  # several batches
        h.add(stored, (stored - lag for lag in lags[i:i + 700]))
    assert h.total == len(lags)
    ordered = sorted(lags)
    for q in (50, 90, 99, 100):
        exact_s = ordered[max(1, -(-q * len(lags) // 100)) - 1] / 1000
        got = h.percentile_s(q)
        assert exact_s < got <= exact_s + BUCKET_MS / 1000 + 1e-9, (q, exact_s, got)


def test_early_and_very_late_facts_are_clamped_not_lost():
    h = FreshnessHistogram()
    h.add(10_000, [20_000, 9_950])  # a node clock ahead of the sink's; 50 ms late
    h.add(10_000_000, [0])  # hours behind: the overflow bucket
    assert h.total == 3
    assert h.percentile_s(50) == 0.1 and h.percentile_s(100) == 3600.0
    assert ">= 3600" in h.summary()


def test_no_facts_no_numbers():
    h = FreshnessHistogram()
    h.add(1, [])
    assert h.percentile_s(50) is None and "no utilization facts" in h.summary()


def test_the_metric_is_a_prometheus_histogram_of_the_same_facts():
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuledger.sinks.freshness import FreshnessCollector
    h, registry = FreshnessHistogram(), CollectorRegistry()
    registry.register(FreshnessCollector(h))
    h.add(100_000, [100_000 - 4_000, 100_000 - 12_000, 100_000 - 12_050, 100_000 - 7_200_000])
    text = generate_latest(registry).decode()
    assert 'gpuledger_sink_fact_freshness_seconds_bucket{le="5.0"} 1.0' in text
    assert 'gpuledger_sink_fact_freshness_seconds_bucket{le="10.0"} 1.0' in text
    assert 'gpuledger_sink_fact_freshness_seconds_bucket{le="15.0"} 3.0' in text
    assert 'gpuledger_sink_fact_freshness_seconds_bucket{le="1800.0"} 3.0' in text
    assert 'gpuledger_sink_fact_freshness_seconds_bucket{le="+Inf"} 4.0' in text
    assert "gpuledger_sink_fact_freshness_seconds_count 4.0" in text
