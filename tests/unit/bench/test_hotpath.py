"""The hot-path benchmark runs the engine on a generated fleet and reports every stage."""

import gc

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
