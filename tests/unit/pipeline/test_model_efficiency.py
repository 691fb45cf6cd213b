"""A model revision changes mid-day, through the pipeline (capture -> ingest -> processor ->
store): each revision's model facts stay apart, whether the new revision comes up in a new
pod beside the old one (a rolling update) or the same pod reloads it with fresh counters."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms
from gpuledger.streams.fact_codec import decode_facts, encode_fact
from pipeline import run_capture

INFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "inference"
VLLM = (INFERENCE / "vllm-metrics-qwen2.5-0.5b.txt").read_text()
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")
MIN, H = 60_000, 3_600_000


def scrape(generated: float, running: float, itl_s: float) -> str:
    """The real vLLM scrape with a busy server's values (tokens so far, a constant inter-token latency)."""
    values = {"vllm:generation_tokens_total": generated, "vllm:prompt_tokens_total": 3 * generated,
              "vllm:num_requests_running": running, "vllm:kv_cache_usage_perc": running / 40,
              "vllm:inter_token_latency_seconds_count": generated, "vllm:inter_token_latency_seconds_sum": generated * itl_s}
    out = []
    for line in VLLM.splitlines():
        name = line.split("{", 1)[0]
        out.append(f"{line.rsplit(' ', 1)[0]} {values[name]}" if name in values else line)
    return "\n".join(out) + "\n"


def write(root: Path, lines: list[dict]) -> Path:
    root.mkdir(parents=True)
    (root / "manifest.json").write_bytes(orjson.dumps({"format": "gpuledger-capture/1", "cluster_id": "c1"}))
    (root / "model-metrics.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return root


def line(t_ms: int, pod: str, revision: str, text: str) -> dict:
    return {"observed_at": format_rfc3339(t_ms), "endpoint_id": "chat", "runtime": "vllm", "pod": pod,
            "revision": revision, "exposition": text}


# revision -> (tokens per minute, running requests, inter-token latency): the new one is faster
REVISIONS = {"sha256:aaa1": (6_000, 10, 0.040), "sha256:bbb2": (9_000, 14, 0.025)}
EVERY_MIN = 5  # a scrape every 5 minutes


def by_revision(store) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in sorted(store.models.values(), key=lambda f: f.observed_at_ms):
        out.setdefault(f.revision, []).append(f)
    return out


def check_apart(facts: dict[str, list]) -> None:
    for revision, (per_min, running, itl) in REVISIONS.items():
        rows = facts[revision]
        assert {f.requests_running for f in rows} == {running}
        assert {f.kv_cache_usage_ratio for f in rows} == {running / 40}
        deltas = [f for f in rows if f.span_ms]
        assert {f.generation_tokens for f in deltas} == {EVERY_MIN * per_min}  # never a difference across revisions
        assert {f.generation_tokens_per_s for f in deltas} == {per_min / 60}
        assert all(f.inter_token_latency_s == pytest.approx(itl) for f in deltas)


def test_rolling_update_at_noon_keeps_each_revisions_metrics_apart(tmp_path):
    lines = []
    for m in range(0, 24 * 60, 5):
        t = T0 + m * MIN
        if t < T0 + 12 * H + 10 * MIN:  # the old pod serves until 12:10, the new one from 11:50
            lines.append(line(t, "chat-7d9f-abcde", "sha256:aaa1", scrape(6_000 * (m + 5), 10, 0.040)))
        if t >= T0 + 11 * H + 50 * MIN:
            n = m - (11 * 60 + 50)
            lines.append(line(t, "chat-5c4b-fghij", "sha256:bbb2", scrape(9_000 * (n + 5), 14, 0.025)))
    mp, summary = run_capture(write(tmp_path / "capture", lines))
    assert sum(summary.rejected.values()) == 0 and mp.dead == []
    facts = by_revision(mp.store)
    assert set(facts) == set(REVISIONS)
    assert {f.pod_name for f in facts["sha256:aaa1"]} == {"chat-7d9f-abcde"}
    assert {f.pod_name for f in facts["sha256:bbb2"]} == {"chat-5c4b-fghij"}
    check_apart(facts)
    assert len(facts["sha256:aaa1"]) == len(facts["sha256:bbb2"]) == (12 * 60 + 10) // EVERY_MIN
    overlap = [f for fs in facts.values() for f in fs if T0 + 11 * H + 50 * MIN <= f.observed_at_ms < T0 + 12 * H + 10 * MIN]
    assert len(overlap) == 2 * 20 // EVERY_MIN  # both revisions, side by side, during the rollout


def test_a_pod_reloading_another_revision_starts_a_new_series(tmp_path):
    lines = []
    for m in range(0, 24 * 60, 4):
        t = T0 + m * MIN
        if t < T0 + 12 * H:
            lines.append(line(t, "chat-0", "sha256:aaa1", scrape(6_000 * (m + 4), 10, 0.040)))
        else:  # the same pod, the model reloaded: its counters start again near zero
            n = m - 12 * 60
            lines.append(line(t, "chat-0", "sha256:bbb2", scrape(9_000 * (n + 4), 14, 0.025)))
    mp, _ = run_capture(write(tmp_path / "capture", lines))
    facts = by_revision(mp.store)
    assert [f.span_ms for f in facts["sha256:bbb2"][:2]] == [0, 4 * MIN]  # no increase taken across the change
    for revision, (per_min, running, itl) in REVISIONS.items():
        deltas = [f for f in facts[revision] if f.span_ms]
        assert {f.generation_tokens for f in deltas} == {4 * per_min}
        assert all(f.inter_token_latency_s == pytest.approx(itl) for f in deltas)


def test_model_facts_round_trip_on_the_wire(tmp_path):
    lines = [line(T0 + m * MIN, "chat-0", "r1", scrape(1_000 * m, 3, 0.03)) for m in range(3)]
    mp, _ = run_capture(write(tmp_path / "capture", lines))
    facts = sorted(mp.store.models.values(), key=lambda f: f.observed_at_ms)
    assert len(facts) == 3 and facts[0].generation_tokens is None and facts[2].generation_tokens == 1_000
    assert decode_facts("models", [encode_fact("models", f) for f in facts]) == facts


def test_a_scrape_that_is_not_prometheus_text_is_a_dead_letter(tmp_path):
    lines = [line(T0, "chat-0", "r1", "this is not {prometheus\n"), line(T0 + MIN, "chat-0", "r1", scrape(10, 1, 0.02))]
    mp, _ = run_capture(write(tmp_path / "capture", lines))
    assert len(mp.dead) == 1 and "model-metrics" in mp.dead[0][0]
    assert len(mp.store.models) == 1
