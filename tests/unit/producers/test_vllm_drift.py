"""Request events against vLLM's own counters: the arithmetic, and the monitor against a real
HTTP server serving vLLM's real /metrics with counters the test moves."""

from __future__ import annotations

import json
import math
import threading
import urllib.request

import pytest

from gpuledger.producers.lines import MemorySink
from gpuledger.producers.requests_events import RequestHttpReceiver
from gpuledger.producers.runtime import ProducerMetrics
from sources.reporters import GATEWAY_TOKEN, reporters
from gpuledger.producers.vllm_drift import (RequestTally, TallySink, VllmDriftMonitor, accumulate_increase,
                                            drift_ratios)
from sources.harness import wait_for, wall_ms
from sources.vllm_server import FIXTURE_MODEL, VllmServer

MODEL = FIXTURE_MODEL


def line(i: int, prompt: int, completion: int, outcome: str = "success", model: str = MODEL,
         endpoint: str = "qwen-shared") -> dict:
    return {"observed_at": "2026-10-01T00:00:10Z", "endpoint_id": endpoint, "model": model, "revision": "",
            "request_id": f"req-{i}", "tenant_id": "team-a", "project_id": "", "arrived_at": "2026-10-01T00:00:09Z",
            "prompt_tokens": prompt, "completion_tokens": completion, "queue_s": None, "ttft_s": None, "e2e_s": 1.0,
            "outcome": outcome}


def gauge(metrics: ProducerMetrics, model: str, measure: str) -> float | None:
    return metrics.registry.get_sample_value("gpuledger_requests_drift_ratio",
                                             {"source": "vllm", "model": model, "measure": measure})


# -- the arithmetic ------------------------------------------------------------------------

def test_increase_accumulates_across_scrapes_and_counter_resets():
    inc = accumulate_increase({"m": {"prompt_tokens": 100.0}}, {"m": {"prompt_tokens": 130.0}}, {})
    assert inc == {"m": {"prompt_tokens": 30.0}}
    inc = accumulate_increase({"m": {"prompt_tokens": 130.0}}, {"m": {"prompt_tokens": 20.0}}, inc)  # restarted
    assert inc == {"m": {"prompt_tokens": 50.0}}
    inc = accumulate_increase({"m": {"prompt_tokens": 20.0}}, {"m": {"prompt_tokens": 25.0}, "n": {"prompt_tokens": 4.0}},
                              inc)
    assert inc == {"m": {"prompt_tokens": 55.0}, "n": {"prompt_tokens": 4.0}}  # a new model counts from 0


def test_drift_is_events_over_vllm_minus_one():
    vllm = {"m": {"prompt_tokens": 200.0, "generation_tokens": 100.0, "successful_requests": 4.0},
            "idle": {"prompt_tokens": 0.0, "generation_tokens": 0.0, "successful_requests": 0.0},
            "ghost": {"prompt_tokens": 0.0, "generation_tokens": 0.0, "successful_requests": 0.0}}
    events = {"m": {"prompt_tokens": 180.0, "completion_tokens": 100.0, "requests": 5.0},
              "ghost": {"prompt_tokens": 7.0, "completion_tokens": 0.0, "requests": 1.0},
              "elsewhere": {"prompt_tokens": 9.0, "completion_tokens": 9.0, "requests": 1.0}}
    drift = drift_ratios(events, vllm)
    assert drift[("m", "prompt_tokens")] == pytest.approx(-0.1)  # a tenth of the prompt tokens has no event
    assert drift[("m", "completion_tokens")] == 0.0
    assert drift[("m", "requests")] == pytest.approx(0.25)
    assert all(drift[("idle", m)] == 0.0 for m in ("prompt_tokens", "completion_tokens", "requests"))
    assert drift[("ghost", "prompt_tokens")] == math.inf and drift[("ghost", "completion_tokens")] == 0.0
    assert not any(model == "elsewhere" for model, _ in drift)  # not served here: not compared


def test_the_tally_counts_tokens_of_every_event_and_requests_that_reached_the_engine():
    tally, inner = RequestTally(), MemorySink()
    sink = TallySink(inner, tally)
    sink.put("requests.jsonl", line(1, 10, 5))
    sink.put("requests.jsonl", line(2, 20, 3, outcome="cancelled"))
    sink.put("requests.jsonl", line(3, 0, 0, outcome="error"))
    sink.put("requests.jsonl", line(4, 8, 8, endpoint="other"))
    sink.put("requests.jsonl", {"observed_at": "2026-10-01T00:00:10Z", "raw": "garbage"})  # not counted
    sink.put("dcgm.jsonl", {"observed_at": "2026-10-01T00:00:10Z", "node": "n", "exposition": ""})
    sink.flush()
    assert inner.flushed == 6 and len(inner.of("requests.jsonl")) == 5  # everything passed on
    assert tally.per_model() == {MODEL: {"prompt_tokens": 38.0, "completion_tokens": 16.0, "requests": 3.0}}
    assert tally.per_model("qwen-shared") == {MODEL: {"prompt_tokens": 30.0, "completion_tokens": 8.0, "requests": 2.0}}


# -- the monitor against a real server -----------------------------------------------------

def test_drift_since_the_first_scrape_through_a_restart(capsys):
    metrics = ProducerMetrics("vllm")
    with VllmServer() as server:
        server.serve(MODEL, 1000, 1000)  # before the monitor started: not compared
        monitor = VllmDriftMonitor(server.url, 0.1, metrics, threshold=0.05)
        sink = monitor.watching(MemorySink())
        sink.put("requests.jsonl", line(0, 1000, 1000))  # likewise
        assert monitor.check(1_000, wall_ms)
        assert {m: gauge(metrics, MODEL, m) for m in ("prompt_tokens", "completion_tokens", "requests")} == {
            "prompt_tokens": 0.0, "completion_tokens": 0.0, "requests": 0.0}
        for i, (p, c, reason, outcome) in enumerate([(12, 64, "length", "success"), (30, 10, "stop", "success"),
                                                     (8, 0, "abort", "cancelled")], start=1):
            server.serve(MODEL, p, c, reason)
            sink.put("requests.jsonl", line(i, p, c, outcome))
        assert monitor.check(2_000, wall_ms)
        assert monitor.drift == {(MODEL, "prompt_tokens"): 0.0, (MODEL, "completion_tokens"): 0.0,
                                 (MODEL, "requests"): 0.0}
        server.serve(MODEL, 50, 26)  # a request the gateway never reported
        assert monitor.check(3_000, wall_ms)
        assert gauge(metrics, MODEL, "prompt_tokens") == pytest.approx(50 / 100 - 1)
        assert gauge(metrics, MODEL, "completion_tokens") == pytest.approx(74 / 100 - 1)
        assert gauge(metrics, MODEL, "requests") == pytest.approx(3 / 4 - 1)
        said = capsys.readouterr().err
        assert f"{MODEL} prompt_tokens: the request events count 50, {server.url} counted 100" in said
        server.restart()  # counters back to 0
        server.serve(MODEL, 50, 26)
        sink.put("requests.jsonl", line(5, 50, 26))
        sink.put("requests.jsonl", line(6, 50, 26))  # the one that went missing, sent late
        assert monitor.check(4_000, wall_ms)
        assert monitor.drift == {(MODEL, "prompt_tokens"): 0.0, (MODEL, "completion_tokens"): 0.0,
                                 (MODEL, "requests"): 0.0}
        assert "prompt_tokens back within 0.05" in capsys.readouterr().err


def test_failures_are_counted_and_the_baseline_survives_them(capsys):
    metrics = ProducerMetrics("vllm")
    with VllmServer() as server:
        monitor = VllmDriftMonitor(server.url, 0.1, metrics)
        assert monitor.check(1_000, wall_ms)
        server.status = 500
        assert not monitor.check(2_000, wall_ms)
        server.status = 200
        server.render = lambda: "# HELP up\nup 1\n"
        assert not monitor.check(3_000, wall_ms)
        server.render = lambda: "this is not { prometheus\n"
        assert not monitor.check(4_000, wall_ms)
        server.render = server._render
        server.serve(MODEL, 10, 10)
        assert monitor.check(5_000, wall_ms)
        assert monitor.drift[(MODEL, "prompt_tokens")] == -1.0  # vLLM's work since the first scrape, no events
    errors = {r: metrics.registry.get_sample_value("gpuledger_producer_errors_total", {"source": "vllm", "reason": r})
              for r in ("http_status", "unparseable")}
    assert errors == {"http_status": 1.0, "unparseable": 2.0}
    said = capsys.readouterr().err
    assert f"{server.url} answered HTTP 500" in said and "no vllm:*_total series" in said and "scraped again" in said


def test_events_posted_to_the_receiver_balance_the_server_on_the_grid():
    metrics = ProducerMetrics("vllm")
    with VllmServer(models=(MODEL, "other/model")) as server:
        monitor = VllmDriftMonitor(server.url, 0.1, metrics, endpoint_id="qwen-shared")
        receiver = RequestHttpReceiver("127.0.0.1:0", ProducerMetrics("requests"), reporters())
        stop = threading.Event()
        threads = [threading.Thread(target=receiver.run, args=(TallySink(MemorySink(), monitor.tally), stop, wall_ms)),
                   threading.Thread(target=monitor.run, args=(MemorySink(), stop, wall_ms))]
        for t in threads:
            t.start()
        try:
            wait_for(lambda: gauge(metrics, MODEL, "requests") is not None)  # the baseline is taken
            records = [{"request_id": f"r{i}", "endpoint_id": "qwen-shared", "model": MODEL, "tenant_id": "a",
                        "arrived_at": "2026-10-01T00:00:09Z", "finished_at": "2026-10-01T00:00:10Z",
                        "usage": {"prompt_tokens": 7, "completion_tokens": 3}, "status": 200} for i in range(4)]
            for _ in records:
                server.serve(MODEL, 7, 3)
            server.serve("other/model", 5, 5)
            request = urllib.request.Request(f"http://127.0.0.1:{receiver.port}/v1/requests",
                                             data=json.dumps(records).encode(), method="POST",
                                             headers={"Authorization": f"Bearer {GATEWAY_TOKEN}"})
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 202
            wait_for(lambda: monitor.drift.get((MODEL, "requests")) == 0.0
                     and monitor._increase[MODEL]["successful_requests"] == 4)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert monitor.drift[(MODEL, "prompt_tokens")] == 0.0 and monitor.drift[(MODEL, "completion_tokens")] == 0.0
        assert monitor.drift[("other/model", "prompt_tokens")] == -1.0  # served, never reported
