"""Every real sample in the reference set parses, with every series accounted for: parsed,
or skipped with a reason."""

from pathlib import Path

import pytest

from gpuledger.domain.dcgm import parse_exposition
from gpuledger.domain.vllm import parse_vllm_metrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _sample_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))


@pytest.mark.parametrize("name", ["dcgm-metrics-k8s-h100.txt", "dcgm-metrics-mig-a100.txt",
                                  "dcgm-metrics-vgpu-guest-grid-a100-40c.txt"])
def test_dcgm_scrapes_account_for_every_series(name):
    text = (FIXTURES / "dcgm" / name).read_text()
    parsed = parse_exposition(text)
    assert parsed.series_parsed > 0
    assert parsed.series_parsed + sum(parsed.skipped.values()) == _sample_lines(text)
    assert all(reason for reason in parsed.skipped)


def test_vgpu_guest_scrape_is_recognised_as_a_guest():
    parsed = parse_exposition((FIXTURES / "dcgm" / "dcgm-metrics-vgpu-guest-grid-a100-40c.txt").read_text())
    (s,) = parsed.samples
    assert s.model == "GRID A100-40C" and s.gpu_uuid == "GPU-0946f70c-659b-4c39-8b78-7e7600000000"


def test_vllm_metrics_account_for_every_series():
    text = (FIXTURES / "inference" / "vllm-metrics-qwen2.5-0.5b.txt").read_text()
    totals = parse_vllm_metrics(text)
    assert totals.series_total == _sample_lines(text)
    assert totals.per_model == {"Qwen/Qwen2.5-0.5B-Instruct": {
        "prompt_tokens": 0.0, "generation_tokens": 0.0, "successful_requests": 0.0}}
    assert totals.series_used == 1 + 1 + len([ln for ln in text.splitlines()
                                              if ln.startswith("vllm:request_success_total{")])
    assert "runtime metric (not vLLM)" in totals.skipped


def test_timeslice_repeated_series_are_not_summed():
    text = "".join(
        f'DCGM_FI_PROF_SM_ACTIVE{{UUID="GPU-t",pod="{p}",namespace="ns"}} 0.4\n' for p in ("a", "b", "c"))
    parsed = parse_exposition(text)
    (s,) = parsed.samples
    assert s.sm_active_ratio == 0.4
    assert parsed.skipped == {"repeated series of the same device (one per sharing pod)": 2}
