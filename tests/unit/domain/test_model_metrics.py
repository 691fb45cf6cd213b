"""Model efficiency facts from real and documented model server scrapes: vLLM (the real
sample, values set as a busy server would have them), Triton with the TensorRT-LLM backend
and NIM for LLMs (constructed from their documented metric names)."""

import re
from pathlib import Path

import pytest

from gpuledger.domain.facts import SourcePos
from gpuledger.domain.model_metrics import model_facts, parse_model_metrics

INFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "inference"
VLLM = (INFERENCE / "vllm-metrics-qwen2.5-0.5b.txt").read_text()
TRITON = (INFERENCE / "triton-metrics-trtllm.constructed.txt").read_text()
NIM = (INFERENCE / "nim-llm-metrics.constructed.txt").read_text()
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
POS = SourcePos("t.source.model-metrics", 0, 7)
T = 1_790_000_000_000


def with_values(text: str, values: dict[str, float]) -> str:
    """``text`` with the value of every sample named in ``values`` replaced (labels kept)."""
    for name, value in values.items():
        text, n = re.subn(rf"^({re.escape(name)}(?:\{{[^}}]*\}})?) \S+$", rf"\g<1> {value}", text, flags=re.M)
        assert n, name
    return text


def busy_vllm(scale: float) -> str:
    return with_values(VLLM, {
        "vllm:num_requests_running": 12 * scale, "vllm:num_requests_waiting": 3 * scale,
        "vllm:kv_cache_usage_perc": 0.4 * scale, "vllm:prompt_tokens_total": 90_000 * scale,
        "vllm:generation_tokens_total": 30_000 * scale, "vllm:inter_token_latency_seconds_sum": 600 * scale,
        "vllm:inter_token_latency_seconds_count": 29_500 * scale, "vllm:iteration_tokens_total_sum": 120_000 * scale,
        "vllm:iteration_tokens_total_count": 4_000 * scale})


def record(text: str, at_ms: int, **kw) -> dict:
    return {"observed_at_ms": at_ms, "cluster_id": "c1", "endpoint_id": "chat", "pod": kw.pop("pod", "chat-0"),
            "runtime": kw.pop("runtime", ""), "revision": kw.pop("revision", ""), "exposition": text, **kw}


def test_the_real_vllm_scrape_gives_its_gauges_and_counters():
    readings, skipped = parse_model_metrics(VLLM)
    (key,) = readings
    assert key == (QWEN, "")
    r = readings[key]
    assert r.runtime == "vllm" and r.gauges == {"running": 0.0, "waiting": 0.0, "kv": 0.0}
    assert {"prompt_tokens", "generation_tokens", "finished", "itl_sum", "itl_count", "steps"} <= set(r.counters)
    assert skipped["no model label (process, runtime or per-GPU series)"] >= 10  # python_*, process_*


def test_a_vllm_scrape_series_gives_the_model_facts():
    series: dict = {}
    first, _ = model_facts(series, record(busy_vllm(1), T, revision="rev-a"), POS, 300_000)
    second, _ = model_facts(series, record(busy_vllm(1.5), T + 30_000, revision="rev-a"), POS, 300_000)
    (f0,), (f1,) = first, second
    assert (f0.model, f0.revision, f0.runtime, f0.span_ms, f0.generation_tokens) == (QWEN, "rev-a", "vllm", 0, None)
    assert (f0.requests_running, f0.requests_waiting, f0.kv_cache_usage_ratio) == (12, 3, 0.4)
    assert f1.span_ms == 30_000 and (f1.prompt_tokens, f1.generation_tokens) == (45_000, 15_000)
    assert f1.generation_tokens_per_s == pytest.approx(500.0)
    assert f1.inter_token_latency_s == pytest.approx(300 / 14_750)
    assert f1.batch_tokens_mean == pytest.approx(60_000 / 2_000)
    assert f1.kv_cache_usage_ratio == pytest.approx(0.6) and f1.requests_running == 18
    assert f1.fact_id != f0.fact_id and (f1.src_topic, f1.src_offset) == (POS.topic, POS.offset)


def test_restart_repeat_and_late_scrapes():
    series: dict = {}
    model_facts(series, record(busy_vllm(2), T), POS, 300_000)
    again, _ = model_facts(series, record(busy_vllm(2), T), POS, 300_000)
    assert again == []  # the same scrape twice is one fact
    (reset,), _ = model_facts(series, record(busy_vllm(0.1), T + 60_000), POS, 300_000)
    assert reset.generation_tokens == 3_000  # vLLM restarted: the whole new count, as Prometheus' increase
    (late,), _ = model_facts(series, record(busy_vllm(1), T + 30_000), POS, 300_000)
    assert (late.span_ms, late.generation_tokens, late.requests_running) == (0, None, 12)
    (stale,), _ = model_facts(series, record(busy_vllm(1), T + 60_000 + 301_000), POS, 300_000)
    assert stale.span_ms == 0  # silent past the staleness limit: the series starts over


def test_triton_with_tensorrt_llm():
    readings, skipped = parse_model_metrics(TRITON)
    assert set(readings) == {(m, "1") for m in ("ensemble", "tensorrt_llm", "preprocessing", "postprocessing")}
    trt = readings[("tensorrt_llm", "1")]
    assert trt.runtime == "triton"
    assert trt.gauges == {"running": 6, "waiting": 2, "kv": pytest.approx(1032 / 4128)}
    assert skipped["no model label (process, runtime or per-GPU series)"] == 4  # nv_gpu_*: DCGM's job
    later = with_values(TRITON, {'nv_inference_count{model="tensorrt_llm",version="1"}': 1604,
                                 'nv_inference_exec_count{model="tensorrt_llm",version="1"}': 351,
                                 'nv_inference_request_success{model="tensorrt_llm",version="1"}': 1604})
    series: dict = {}
    model_facts(series, record(TRITON, T, runtime="triton"), POS, 300_000)
    facts, _ = model_facts(series, record(later, T + 15_000, runtime="triton"), POS, 300_000)
    f = next(f for f in facts if f.model == "tensorrt_llm")
    assert (f.revision, f.batch_size_mean, f.requests_finished) == ("1", 400 / 50, 400)
    assert f.inter_token_latency_s is None and f.generation_tokens is None  # Triton core counts no tokens


def test_nim_for_llms():
    readings, _ = parse_model_metrics(NIM, runtime="nim")
    ((model, revision), r), = readings.items()
    assert (model, revision, r.runtime) == ("meta/llama-3.1-8b-instruct", "", "nim")
    assert r.gauges == {"running": 7, "waiting": 1, "kv": 0.0923}
    later = with_values(NIM, {"generation_tokens_total": 402_117 + 9_000, "time_per_output_token_seconds_sum": 6_122.21,
                              "time_per_output_token_seconds_count": 399_106 + 9_000})
    series: dict = {}
    model_facts(series, record(NIM, T, runtime="nim", revision="nim-1.3.0"), POS, 300_000)
    (f,), _ = model_facts(series, record(later, T + 10_000, runtime="nim", revision="nim-1.3.0"), POS, 300_000)
    assert f.generation_tokens_per_s == pytest.approx(900.0)
    assert f.inter_token_latency_s == pytest.approx(135 / 9_000)  # time_per_output_token: NIM's inter-token latency


def test_the_revision_comes_from_the_record_else_the_labels():
    labelled = VLLM.replace('model_name="Qwen', 'revision="b7c1",model_name="Qwen')
    assert set(parse_model_metrics(labelled)[0]) == {(QWEN, "b7c1")}
    assert set(parse_model_metrics(labelled, revision="from-deployment")[0]) == {(QWEN, "from-deployment")}


def test_not_prometheus_text_is_refused():
    with pytest.raises(ValueError):
        parse_model_metrics("vllm:num_requests_running{model_name=\"x\"} not-a-number\n")
