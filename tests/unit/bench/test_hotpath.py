"""The hot-path benchmark runs the engine on a generated fleet and reports every stage."""

import gc

import pytest

from gpuledger.bench.hotpath import run


def test_the_hot_path_bench_attributes_the_fleet_and_times_each_stage():
    before = gc.get_threshold()
    out = run(gpus=16, hours=0.25, cadence_s=10, advance_every=200, progress=lambda _m: None)
    assert gc.get_threshold() == before  # the worker's collector setting is the run's, not the caller's
    assert out["device_samples"] == 16 * 90 and out["dead_lettered"] == 0
    # utilization and health facts for every sample, capacity facts besides
    assert out["facts"] > 2 * out["device_samples"]
    cost = out["us_per_sample"]
    assert all(cost[k] > 0 for k in ("avro_decode_dcgm", "handle", "advance", "encode"))
    assert abs(cost["worker_total"] - (cost["handle"] + cost["advance"] + cost["encode"])) < 0.05


def test_the_python_capacity_run_uses_the_reference_and_puts_the_c_path_back():
    from gpuledger.domain import _facts, attribution

    taken = _facts.segment_counts()[0]
    c = run(gpus=16, hours=0.25, cadence_s=10, advance_every=200, progress=lambda _m: None)
    assert _facts.segment_counts()[0] > taken  # the C path made the segments
    taken = _facts.segment_counts()[0]
    py = run(gpus=16, hours=0.25, cadence_s=10, advance_every=200, progress=lambda _m: None, python_capacity=True)
    assert _facts.segment_counts()[0] == taken  # the reference made them all
    assert attribution.segment_facts is _facts.segment_facts
    assert py["facts"] == c["facts"] > 0


def test_a_dcgm_records_share_of_each_stage_is_reported_and_the_stages_put_back():
    from gpuledger.domain import attribution
    from gpuledger.domain.gpu_incidents import HealthFold

    parse, health = attribution.parse_exposition, HealthFold.scrape
    plain = run(gpus=16, hours=0.25, cadence_s=10, advance_every=200, progress=lambda _m: None)
    out = run(gpus=16, hours=0.25, cadence_s=10, advance_every=200, progress=lambda _m: None, stages=True)
    assert (attribution.parse_exposition, HealthFold.scrape) == (parse, health)
    assert "dcgm_parse" not in plain["us_per_dcgm_record"]
    rec = out["us_per_dcgm_record"]
    assert all(rec[k] > 0 for k in ("handle_dcgm", "handle_podresources", "handle_k8s", "advance", "encode",
                                    "dcgm_parse", "dcgm_health", "dcgm_decode"))
    assert rec["dcgm_parse"] + rec["dcgm_health"] + rec["dcgm_decode"] < rec["handle_dcgm"]
    # a record's shares add up to the per-sample costs: 8 samples a record (nodes of 8 GPUs)
    handled = sum(v for k, v in rec.items() if k.startswith("handle_"))
    assert handled == pytest.approx(8 * out["us_per_sample"]["handle"], rel=0.02, abs=0.2)
