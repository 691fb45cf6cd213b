"""DCGM exposition parsing against real scrapes from the reference set."""

from pathlib import Path

import pytest

from gpuledger.domain.dcgm import parse_exposition

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def test_real_h100_k8s_scrape():
    parsed = parse_exposition((FIXTURES / "dcgm-metrics-k8s-h100.txt").read_text())
    assert len(parsed.samples) == 8
    gpu0 = next(s for s in parsed.samples if s.gpu_uuid == "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005")
    assert gpu0.power_w == pytest.approx(113.611)
    assert gpu0.sm_active_ratio == 0.0  # DCGM_FI_DEV_GPU_UTIL 0 % (no PROF fields in this scrape)


def test_real_mig_scrape_units_and_the_instance_kept_apart_from_its_parent():
    parsed = parse_exposition((FIXTURES / "dcgm-metrics-mig-a100.txt").read_text())
    gpu, instance = parsed.samples
    assert gpu.gpu_instance_id is None
    assert gpu.fb_used_bytes == 4845 * 1024 * 1024  # MiB -> bytes
    assert gpu.energy_j == pytest.approx(319159.391)  # mJ -> J
    assert gpu.sm_active_ratio == pytest.approx(0.995630)  # GR_ENGINE_ACTIVE when SM_ACTIVE is absent
    assert (instance.gpu_uuid, instance.gpu_instance_id) == (gpu.gpu_uuid, 13)  # parent UUID + GPU_I_ID
    assert instance.sm_active_ratio == pytest.approx(0.995687)
    assert all(reason.startswith("not an attribution field: ") for reason in parsed.skipped)


def test_sentinels_dropped_and_both_uuid_spellings():
    text = (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",Hostname="n"} 0.5\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n"} 9223372036854775794\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",gpu_uuid="GPU-b",hostname="n"} 0.25\n'
        'DCGM_FI_DEV_FB_USED{gpu="1",gpu_uuid="GPU-b",hostname="n"} NaN\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="2"} 0.1\n'
    )
    parsed = parse_exposition(text)
    by = {s.gpu_uuid: s for s in parsed.samples}
    assert by["GPU-a"].sm_active_ratio == 0.5 and by["GPU-a"].power_w is None
    assert by["GPU-b"].sm_active_ratio == 0.25 and by["GPU-b"].fb_used_bytes is None
    assert parsed.skipped == {"DCGM blank sentinel": 2, "no UUID label": 1}


def test_label_values_with_braces_and_escapes():
    text = 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-x",pod="we}ird \\"name\\""} 0.75\n'
    (s,) = parse_exposition(text).samples
    assert s.gpu_uuid == "GPU-x" and s.sm_active_ratio == 0.75


@pytest.mark.parametrize("bad", ['DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-x" 0.5\n', 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-x"}\n',
                                 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-x"} abc\n'])
def test_malformed_exposition_raises(bad):
    with pytest.raises(ValueError):
        parse_exposition(bad)
