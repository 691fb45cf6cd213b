"""Model efficiency: a model server's ``/metrics`` scrape -> one fact per endpoint, model and
revision. Gauges are taken as read at the scrape; counters (tokens, finished requests,
histogram sums and counts) as their increase since the previous scrape of the same series,
over ``[previous observed_at, observed_at)``. A series is (endpoint, pod, runtime, model,
revision): a new revision is a new series, so its counters never mix with the old one's.

What is read, by metric name (vLLM's ``vllm:`` prefix removed: NIM for LLMs exposes the same
names without it; Triton's vLLM backend exposes vLLM's, labelled ``model`` and ``version``):

- running / waiting requests: ``num_requests_running`` / ``num_requests_waiting`` (vLLM, NIM);
  Triton ``nv_inference_pending_request_count`` (waiting) and the TensorRT-LLM backend's
  ``nv_trt_llm_request_metrics{request_type="active"|"waiting"}``. Summed over the engines
  (vLLM's ``engine`` label) of a model.
- KV-cache usage, a 0-1 ratio: ``kv_cache_usage_perc`` (vLLM v1), ``gpu_cache_usage_perc`` (vLLM
  v0, NIM), TensorRT-LLM ``nv_trt_llm_kv_cache_block_metrics`` (``fraction``, else used/max
  blocks). The mean over the engines.
- tokens: ``prompt_tokens_total``, ``generation_tokens_total``; tokens per second = generation
  tokens' increase / the span.
- finished requests: ``request_success_total`` (every ``finished_reason``), Triton
  ``nv_inference_request_success``.
- inter-token latency: ``inter_token_latency_seconds`` (vLLM v1), else
  ``time_per_output_token_seconds`` (vLLM v0, NIM): the mean = increase of ``_sum`` / of ``_count``.
- batch: tokens per engine step from ``iteration_tokens_total`` (``_sum`` / ``_count``); Triton's
  inferences per execution, ``nv_inference_count`` / ``nv_inference_exec_count``, as its manual
  defines the average batch size.

The model is the ``model_name`` label (vLLM, NIM), else ``model`` (Triton). The revision is the
one the scrape record names (the producer reads it from the serving pod's deployment), else a
``revision`` label, else Triton's model ``version``. Series without a model (the process', the
Python runtime's, Triton's per-GPU ``nv_gpu_*``: DCGM is the GPU evidence) are skipped.

A counter lower than before was reset (a restart): its increase is its whole value, as
Prometheus' ``increase`` does. A scrape no later than its series' previous one leaves the state
alone: the same instant again is a repeat (no fact), an earlier one gives its gauges only.
A series not scraped for ``stale_ms`` while its endpoint was starts over (its next scrape
gives gauges only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gpuledger.domain.facts import SourcePos, fact_id

__all__ = ["ModelFact", "ModelReading", "model_facts", "parse_model_metrics"]

RUNTIMES = ("vllm", "triton", "nim")
_SUMMED_GAUGES = {"num_requests_running": "running", "num_requests_waiting": "waiting",
                  "nv_inference_pending_request_count": "waiting"}
_MEAN_GAUGES = {"kv_cache_usage_perc": "kv", "gpu_cache_usage_perc": "kv"}
_TRT_REQUESTS = {"active": "running", "waiting": "waiting"}
_COUNTERS = {
    "prompt_tokens_total": "prompt_tokens", "generation_tokens_total": "generation_tokens",
    "request_success_total": "finished", "nv_inference_request_success": "finished",
    "inter_token_latency_seconds_sum": "itl_sum", "inter_token_latency_seconds_count": "itl_count",
    "time_per_output_token_seconds_sum": "tpot_sum", "time_per_output_token_seconds_count": "tpot_count",
    "iteration_tokens_total_sum": "step_tokens", "iteration_tokens_total_count": "steps",
    "nv_inference_count": "inferences", "nv_inference_exec_count": "executions",
}
# Prometheus' text parser names a counter's samples ``<name>_total`` where the exposition does not (Triton's)
_COUNTERS.update({f"{n}_total": k for n, k in list(_COUNTERS.items()) if n.startswith("nv_")})


@dataclass(frozen=True)
class ModelFact:
    """One scrape of one series: gauges at ``observed_at_ms``, counters' increases over the
    ``span_ms`` before it (None: unknown, the series' first scrape or a late one)."""

    fact_id: str
    cluster_id: str
    endpoint_id: str
    runtime: str
    model: str
    revision: str
    pod_name: str
    observed_at_ms: int
    span_ms: int
    requests_running: float | None
    requests_waiting: float | None
    kv_cache_usage_ratio: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    generation_tokens_per_s: float | None
    requests_finished: float | None
    inter_token_latency_s: float | None
    inter_token_count: float | None
    batch_size_mean: float | None
    batch_tokens_mean: float | None
    src_topic: str
    src_partition: int
    src_offset: int


@dataclass
class ModelReading:
    """What one scrape says of one model and revision."""

    runtime: str
    gauges: dict[str, float]  # running, waiting, kv
    counters: dict[str, float]  # _COUNTERS' values -> cumulative value
    kv_parts: dict[str, float]  # TensorRT-LLM KV blocks: used, max, fraction


def _usable(value: float) -> bool:
    return math.isfinite(value) and 0 <= value < 9e18  # DCGM-style "not supported" sentinels too


def parse_model_metrics(exposition: str, revision: str = "", runtime: str = ""
                        ) -> tuple[dict[tuple[str, str], ModelReading], dict[str, int]]:
    """((model, revision) -> reading, skipped series by reason) of one scrape. Raises
    ``ValueError`` when the text is not Prometheus exposition."""
    out: dict[tuple[str, str], ModelReading] = {}
    kv_seen: dict[tuple[str, str], int] = {}
    skipped: dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            name = s.name.removeprefix("vllm:")
            model = s.labels.get("model_name") or s.labels.get("model") or ""
            if not model:
                skip("no model label (process, runtime or per-GPU series)")
                continue
            if not _usable(s.value):
                skip("not a finite, non-negative value")
                continue
            rev = revision or s.labels.get("revision") or s.labels.get("version") or ""
            seen = runtime or ("vllm" if s.name.startswith("vllm:") else "triton" if name.startswith("nv_") else "nim")
            r = out.setdefault((model, rev), ModelReading(seen, {}, {}, {}))
            if name in _SUMMED_GAUGES:
                key = _SUMMED_GAUGES[name]
                r.gauges[key] = r.gauges.get(key, 0.0) + s.value
            elif name in _MEAN_GAUGES:
                n = kv_seen[(model, rev)] = kv_seen.get((model, rev), 0) + 1
                r.gauges["kv"] = r.gauges.get("kv", 0.0) + (s.value - r.gauges.get("kv", 0.0)) / n
            elif name == "nv_trt_llm_request_metrics" and s.labels.get("request_type") in _TRT_REQUESTS:
                key = _TRT_REQUESTS[s.labels["request_type"]]
                r.gauges[key] = r.gauges.get(key, 0.0) + s.value
            elif name == "nv_trt_llm_kv_cache_block_metrics" and s.labels.get("kv_cache_block_type") in (
                    "used", "max", "fraction"):
                r.kv_parts[s.labels["kv_cache_block_type"]] = s.value
            elif name in _COUNTERS:
                key = _COUNTERS[name]
                r.counters[key] = r.counters.get(key, 0.0) + s.value
            else:
                skip(f"not a model efficiency metric: {family.name}")
    for r in out.values():
        if "kv" not in r.gauges and r.kv_parts:
            parts = r.kv_parts
            if "fraction" in parts:
                r.gauges["kv"] = parts["fraction"]
            elif parts.get("max", 0) > 0 and "used" in parts:
                r.gauges["kv"] = parts["used"] / parts["max"]
    return out, skipped


def _increase(before: dict[str, float], now: dict[str, float]) -> dict[str, float]:
    return {k: (v - before[k] if v >= before[k] else v) for k, v in now.items() if k in before}


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def model_facts(series: dict[str, list], record: dict, pos: SourcePos, stale_ms: int
                ) -> tuple[list[ModelFact], dict[str, int]]:
    """The facts of one ``model_scrape`` record, and the series it skipped. ``series``: the
    previous scrape of each series, ``key -> [observed_at_ms, counters]`` (JSON-able state),
    updated."""
    ts, cluster, endpoint = record["observed_at_ms"], record["cluster_id"], record["endpoint_id"]
    pod = record.get("pod", "")
    readings, skipped = parse_model_metrics(record["exposition"], record.get("revision", ""), record.get("runtime", ""))
    mine = f"{cluster}\x1f{endpoint}\x1f"
    for key in [k for k, (t, _) in series.items() if t < ts - stale_ms and k.startswith(mine)]:
        del series[key]  # bounded: a series of this endpoint gone quiet (a revision rolled out) is forgotten
    out = []
    for (model, revision), r in sorted(readings.items()):
        key = "\x1f".join((cluster, endpoint, pod, r.runtime, model, revision))
        prev = series.get(key)
        if prev is not None and prev[0] == ts:
            continue  # the same scrape again
        inc: dict[str, float] = {}
        span = 0
        if prev is not None and prev[0] < ts:
            inc, span = _increase(prev[1], r.counters), ts - prev[0]
        if prev is None or prev[0] < ts:
            series[key] = [ts, dict(r.counters)]
        itl_sum, itl_count = ((inc.get("itl_sum"), inc.get("itl_count")) if "itl_count" in inc
                              else (inc.get("tpot_sum"), inc.get("tpot_count")))
        gen = inc.get("generation_tokens")
        out.append(ModelFact(
            fact_id=fact_id("model", cluster, endpoint, pod, r.runtime, model, revision, ts),
            cluster_id=cluster, endpoint_id=endpoint, runtime=r.runtime, model=model, revision=revision,
            pod_name=pod, observed_at_ms=ts, span_ms=span, requests_running=r.gauges.get("running"),
            requests_waiting=r.gauges.get("waiting"), kv_cache_usage_ratio=r.gauges.get("kv"),
            prompt_tokens=inc.get("prompt_tokens"), generation_tokens=gen,
            generation_tokens_per_s=gen / (span / 1000) if gen is not None and span > 0 else None,
            requests_finished=inc.get("finished"), inter_token_latency_s=_ratio(itl_sum, itl_count),
            inter_token_count=itl_count, batch_size_mean=_ratio(inc.get("inferences"), inc.get("executions")),
            batch_tokens_mean=_ratio(inc.get("step_tokens"), inc.get("steps")),
            src_topic=pos.topic, src_partition=pos.partition, src_offset=pos.offset))
    return out, skipped
