"""What the demo's model servers say on ``/metrics``: one vLLM scrape per serving pod of a
shared endpoint every ``every_ms``, in vLLM v1's names and shapes (the real sample in
tests/fixtures/inference/), consistent with the demo's request log. Counters are what the
pod's requests finished so far (tokens, successes, inter-token latency sum and count, engine
steps); the gauges are the pod's mean concurrency over the last interval (running: arrived
but not yet finished; waiting: within its queue time) and a KV-cache usage that follows it.
Requests go to the endpoint's pods serving at their arrival, round robin; the revision a pod
serves is the one its latest request names (a model-metrics.jsonl line says it)."""

from __future__ import annotations

from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

__all__ = ["model_scrape_lines", "vllm_exposition"]

_ENGINE = 'engine="0"'
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
_STEP_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)
DECODE_BATCH = 6  # sequences per decode step the demo assumes


def vllm_exposition(model: str, c: dict[str, float]) -> str:
    """A vLLM v1 ``/metrics`` body of one engine with the values in ``c`` (running, waiting,
    kv, prompt, generation, success, itl_sum, itl_count, step_tokens, steps). Histogram
    buckets are filled as if every observation were the mean (only ``_sum``/``_count`` are read)."""
    lab = f'{_ENGINE},model_name="{model}"'
    out = []

    def family(name: str, kind: str, help_: str, lines: list[str]) -> None:
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", *lines])

    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           [f"vllm:num_requests_running{{{lab}}} {c['running']}"])
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [f"vllm:num_requests_waiting{{{lab}}} {c['waiting']}"])
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           [f"vllm:kv_cache_usage_perc{{{lab}}} {c['kv']}"])
    family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           [f"vllm:prompt_tokens_total{{{lab}}} {c['prompt']}"])
    family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           [f"vllm:generation_tokens_total{{{lab}}} {c['generation']}"])
    family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
           [f'vllm:request_success_total{{{_ENGINE},finished_reason="stop",model_name="{model}"}} {c["success"]}',
            f'vllm:request_success_total{{{_ENGINE},finished_reason="length",model_name="{model}"}} 0.0'])
    for name, help_, buckets, total, count in (
            ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", _STEP_BUCKETS,
             c["step_tokens"], c["steps"]),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _ITL_BUCKETS,
             c["itl_sum"], c["itl_count"])):
        mean = total / count if count else 0.0
        lines = [f'{name}_bucket{{{_ENGINE},le="{b}",model_name="{model}"}} {count if mean <= b else 0.0}'
                 for b in buckets]
        lines += [f'{name}_bucket{{{_ENGINE},le="+Inf",model_name="{model}"}} {count}',
                  f"{name}_count{{{lab}}} {count}", f"{name}_sum{{{lab}}} {total}"]
        family(name, "histogram", help_, lines)
    return "\n".join(out) + "\n"


def model_scrape_lines(pods: list, requests: list[dict], start_ms: int, end_ms: int,
                       every_ms: int = 60_000) -> list[dict]:
    """``model-metrics.jsonl`` lines of the serving pods (PodPlan-like: namespace, name,
    endpoint, start_ms, end_ms) from the request log, ordered by time."""
    serving = sorted((p for p in pods if p.endpoint), key=lambda p: (p.start_ms, p.name))
    mine: dict[str, list[dict]] = {p.name: [] for p in serving}
    turn: dict[str, int] = {}
    for r in sorted(requests, key=lambda r: (r["observed_at"], r["request_id"])):
        arrived = parse_rfc3339_ms(r.get("arrived_at") or r["observed_at"])
        up = [p for p in serving if p.endpoint == r["endpoint_id"] and p.start_ms <= arrived < p.end_ms]
        if up:
            n = turn[r["endpoint_id"]] = turn.get(r["endpoint_id"], -1) + 1
            mine[up[n % len(up)].name].append(r)
    out = []
    for p in serving:
        done = sorted(mine[p.name], key=lambda r: r["observed_at"])
        c = dict.fromkeys(("prompt", "generation", "success", "itl_sum", "itl_count", "step_tokens", "steps"), 0.0)
        i, revision = 0, next((r["revision"] for r in done if r.get("revision")), "")
        spans = [_span(r) for r in mine[p.name]]
        first = max(p.start_ms, start_ms) + every_ms - 1
        for t in range(first - first % every_ms, min(p.end_ms, end_ms), every_ms):
            while i < len(done) and parse_rfc3339_ms(done[i]["observed_at"]) <= t:
                _count(c, done[i])
                revision = done[i].get("revision") or revision
                i += 1
            busy_s, queued_s = _concurrency(spans, t - every_ms, t)
            running, waiting = round(busy_s / (every_ms / 1000), 3), round(queued_s / (every_ms / 1000), 3)
            c.update(running=running, waiting=waiting, kv=round(min(0.95, 0.04 + 0.11 * running), 4))
            out.append({"observed_at": format_rfc3339(t), "endpoint_id": p.endpoint, "runtime": "vllm",
                        "pod": p.name, "revision": revision,
                        "exposition": vllm_exposition(_model(mine[p.name]), c)})
    return sorted(out, key=lambda line: line["observed_at"])


def _model(requests: list[dict]) -> str:
    return next((r["model"] for r in requests if r.get("model")), "")


def _count(c: dict[str, float], r: dict) -> None:
    prompt, gen = r["prompt_tokens"], r["completion_tokens"]
    c["prompt"] += prompt
    c["generation"] += gen
    c["success"] += r["outcome"] == "success"
    if gen > 1 and r.get("ttft_s") is not None and r.get("e2e_s") is not None:
        c["itl_sum"] = round(c["itl_sum"] + max(r["e2e_s"] - r["ttft_s"], 0.0), 6)
        c["itl_count"] += gen - 1
    c["steps"] += 1 + -(-gen // DECODE_BATCH)  # one prefill step, its share of the decode steps
    c["step_tokens"] += prompt + gen


def _span(r: dict) -> tuple[int, int, int]:
    """(arrived, queued until, finished) of a request, in ms."""
    end = parse_rfc3339_ms(r["observed_at"])
    start = parse_rfc3339_ms(r.get("arrived_at") or r["observed_at"])
    return start, start + int((r.get("queue_s") or 0) * 1000), end


def _concurrency(spans: list[tuple[int, int, int]], from_ms: int, to_ms: int) -> tuple[float, float]:
    """Seconds of requests in flight and of requests queued within ``[from_ms, to_ms)``."""
    busy = queued = 0
    for start, q_end, end in spans:
        if end <= from_ms or start >= to_ms:
            continue
        busy += min(end, to_ms) - max(start, from_ms)
        queued += max(0, min(q_end, to_ms) - max(start, from_ms))
    return busy / 1000, queued / 1000
