"""The DCGM scraper against a real HTTP server serving real dcgm-exporter scrapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.producers.dcgm_scrape import DcgmScrapeProducer, check_exposition
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import ProducerMetrics
from sources.dcgm_exporter import DcgmExporter, real_scrape
from sources.harness import Running, errors, wait_for, wall_ms

VLLM_METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "inference" / "vllm-metrics-qwen2.5-0.5b.txt"


def records(metrics: ProducerMetrics) -> float:
    return metrics.registry.get_sample_value("gpuledger_producer_records_total",
                                             {"source": "dcgm", "file": "dcgm.jsonl"}) or 0.0


def test_verbatim_exposition_at_grid_ticks_and_a_switched_body():
    h100, mig = real_scrape(), real_scrape("dcgm-metrics-mig-a100.txt")
    sink, metrics = MemorySink(), ProducerMetrics("dcgm")
    with DcgmExporter() as exporter, Running(DcgmScrapeProducer(exporter.url, "gpu-node-1", 0.1, metrics), sink):
        wait_for(lambda: len(sink.of("dcgm.jsonl")) >= 3)
        exporter.set_body(mig)
        wait_for(lambda: sink.of("dcgm.jsonl")[-1]["exposition"] == mig)
    lines = sink.of("dcgm.jsonl")
    assert all(set(line) == {"observed_at", "node", "exposition"} and line["node"] == "gpu-node-1" for line in lines)
    assert lines[0]["exposition"] == h100  # verbatim, byte for byte
    assert {line["exposition"] for line in lines} == {h100, mig}
    ticks = [parse_rfc3339_ms(line["observed_at"]) for line in lines]
    assert all(t % 100 == 0 for t in ticks) and ticks == sorted(set(ticks))
    assert sink.flushed == len(lines) and records(metrics) == len(lines)
    assert metrics.registry.get_sample_value("gpuledger_producer_lag_seconds", {"source": "dcgm"}) < 5


def test_http_error_timeout_and_refused_are_counted_said_and_recovered(capsys):
    sink, metrics = MemorySink(), ProducerMetrics("dcgm")
    exporter = DcgmExporter()
    producer = DcgmScrapeProducer(exporter.url, "n", 0.1, metrics, timeout_s=0.3)
    try:
        assert producer.scrape(sink, 1_000, wall_ms)
        exporter.status = 500
        assert not producer.scrape(sink, 2_000, wall_ms) and not producer.scrape(sink, 3_000, wall_ms)
        assert errors(metrics, "http_status") == 2
        exporter.status, exporter.delay_s = 200, 1.0
        assert not producer.scrape(sink, 4_000, wall_ms)
        assert errors(metrics, "timeout") == 1
        exporter.delay_s = 0.0
        exporter.stop()
        assert not producer.scrape(sink, 5_000, wall_ms)
        assert errors(metrics, "unreachable") == 1
        exporter.start()  # same port
        assert producer.scrape(sink, 6_000, wall_ms)
    finally:
        exporter.stop()
    assert [line["observed_at"] for line in sink.of("dcgm.jsonl")] == ["1970-01-01T00:00:01Z", "1970-01-01T00:00:06Z"]
    said = capsys.readouterr().err
    assert f"{exporter.url} answered HTTP 500" in said and said.count("HTTP 500") == 1  # once per problem
    assert "did not answer within 0.3 s" in said and f"cannot reach {exporter.url}" in said
    assert "scraped again" in said


def test_the_loop_survives_an_outage_and_resumes_on_the_grid():
    sink, metrics = MemorySink(), ProducerMetrics("dcgm")
    with DcgmExporter() as exporter, Running(DcgmScrapeProducer(exporter.url, "n", 0.1, metrics), sink):
        wait_for(lambda: len(sink.lines) >= 1)
        exporter.status = 500
        wait_for(lambda: errors(metrics, "http_status") >= 3)
        during = len(sink.lines)
        exporter.status = 200
        wait_for(lambda: len(sink.lines) >= during + 2)
    assert all(line["exposition"] == real_scrape() for _, line in sink.lines)


@pytest.mark.parametrize("body", ["<html><body>502 Bad Gateway</body></html>\n", "", "up 1\n",
                                  'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-x" 5\n', VLLM_METRICS.read_text()])
def test_a_body_that_is_not_a_dcgm_scrape_is_counted_and_not_published(body, capsys):
    sink, metrics = MemorySink(), ProducerMetrics("dcgm")
    with DcgmExporter(body) as exporter:
        producer = DcgmScrapeProducer(exporter.url, "n", 0.1, metrics)
        assert not producer.scrape(sink, 1_000, wall_ms)
        assert sink.lines == [] and errors(metrics, "unparseable") == 1
        assert f"{exporter.url} answered a body that is not a dcgm-exporter scrape" in capsys.readouterr().err
        exporter.set_body(real_scrape("dcgm-metrics-vgpu-guest-grid-a100-40c.txt"))
        assert producer.scrape(sink, 2_000, wall_ms)


def test_a_scrape_of_blank_values_only_is_still_a_scrape():
    blanks = 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n"} 140737488355328\n'
    assert check_exposition(blanks) is None
    assert check_exposition("up 1\n") == "no DCGM_FI_* series in it"
    assert check_exposition('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 30\n') is None  # DCGM, not attribution


def test_the_node_is_required():
    with pytest.raises(ValueError, match="node"):
        DcgmScrapeProducer("http://127.0.0.1:1/metrics", "", 1.0, ProducerMetrics("dcgm"))
