"""The model-metrics scraper against a real HTTP server serving real and documented model
server scrapes (vLLM's real /metrics, Triton and NIM from their documented names), through
the capture pipeline into model facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.model_scrape import ModelScrapeProducer, check_model_exposition
from gpuledger.producers.runtime import ProducerMetrics
from sources.harness import Running, errors, wait_for, wall_ms
from sources.metrics_http import MetricsServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "inference"
VLLM = (FIXTURES / "vllm-metrics-qwen2.5-0.5b.txt").read_text()
TRITON = (FIXTURES / "triton-metrics-trtllm.constructed.txt").read_text()
DCGM = (FIXTURES.parent / "dcgm" / "dcgm-metrics-k8s-h100.txt").read_text()


def test_verbatim_scrapes_at_grid_ticks_with_the_endpoint_it_serves():
    body = {"text": VLLM}
    sink, metrics = MemorySink(), ProducerMetrics("model-metrics")
    with MetricsServer(lambda: body["text"]) as server, Running(
            ModelScrapeProducer(server.url, "chat", 0.1, metrics, "vllm", "chat-0", "r7"), sink):
        wait_for(lambda: len(sink.of("model-metrics.jsonl")) >= 3)
        body["text"] = TRITON
        wait_for(lambda: sink.of("model-metrics.jsonl")[-1]["exposition"] == TRITON)
    lines = sink.of("model-metrics.jsonl")
    assert all({k: v for k, v in line.items() if k not in ("observed_at", "exposition")} ==
               {"endpoint_id": "chat", "runtime": "vllm", "pod": "chat-0", "revision": "r7"} for line in lines)
    assert lines[0]["exposition"] == VLLM  # verbatim
    ticks = [parse_rfc3339_ms(line["observed_at"]) for line in lines]
    assert all(t % 100 == 0 for t in ticks) and ticks == sorted(set(ticks))
    assert sink.flushed == len(lines)


def test_a_body_of_no_model_server_is_counted_and_not_published(capsys):
    body = {"text": DCGM}
    sink, metrics = MemorySink(), ProducerMetrics("model-metrics")
    with MetricsServer(lambda: body["text"]) as server:
        producer = ModelScrapeProducer(server.url, "chat", 0.1, metrics)
        assert not producer.scrape(sink, 1_000, wall_ms) and not producer.scrape(sink, 2_000, wall_ms)
        assert errors(metrics, "unparseable") == 2 and sink.of("model-metrics.jsonl") == []
        body["text"] = VLLM
        assert producer.scrape(sink, 3_000, wall_ms)
    said = capsys.readouterr().err
    assert said.count("not a model server scrape") == 1 and "scraped again" in said


def test_checks_and_settings_refuse_what_cannot_be_scraped():
    assert check_model_exposition(VLLM) is None and check_model_exposition(TRITON) is None
    assert "no model efficiency series" in check_model_exposition(DCGM)
    assert "not Prometheus text" in check_model_exposition("<html>{oops</html>\n")
    with pytest.raises(ValueError, match="endpoint_id is empty"):
        ModelScrapeProducer("http://x", "", 1.0, ProducerMetrics("model-metrics"))
    with pytest.raises(ValueError, match="runtime"):
        ModelScrapeProducer("http://x", "chat", 1.0, ProducerMetrics("model-metrics"), runtime="tgi")


def test_produce_model_metrics_is_configured_from_the_settings():
    from gpuledger.cli.produce import UsageError, build_producer
    from gpuledger.config import load_settings

    metrics = ProducerMetrics("model-metrics")
    with pytest.raises(UsageError, match="--model-url URL --endpoint ID"):
        build_producer("model-metrics", load_settings(), metrics, "n1")
    producer = build_producer("model-metrics", load_settings(model_metrics_url="http://127.0.0.1:8000/metrics",
                                                             model_endpoint_id="chat", model_runtime="vllm"),
                              metrics, "n1")
    assert (producer.url, producer.endpoint_id, producer.runtime) == ("http://127.0.0.1:8000/metrics", "chat", "vllm")
