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


@pytest.mark.parametrize("bad", ['DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-c"}\n', 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-c"} abc\n',
                                 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-c"} 0.5}\n'])
def test_a_series_seen_before_is_judged_again_on_every_line(bad):
    """Series are cached between scrapes: a cached series with a missing or bad value still
    raises, and a good value after it parses as on first sight."""
    good = 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-c"} 0.5\n'
    first = parse_exposition(good)
    with pytest.raises(ValueError):
        parse_exposition(good + bad)
    assert parse_exposition(good) == first and first.samples[0].sm_active_ratio == 0.5


def test_the_value_is_read_before_the_labels_of_a_new_series():
    """A line whose labels and value are both broken names its missing value, cached or not."""
    line = 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-d",x="1" 2}\n'
    for _ in range(2):
        with pytest.raises(ValueError, match="sample without a value"):
            parse_exposition(line)


def test_values_with_a_timestamp_or_extra_blanks():
    text = ('DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-e"}  0.25 1700000000000\n'
            'DCGM_FI_DEV_POWER_USAGE{UUID="GPU-e"}\t300.5\n'
            'DCGM_FI_DEV_FB_USED 12\n')
    parsed = parse_exposition(text)
    (s,) = parsed.samples
    assert (s.sm_active_ratio, s.power_w) == (0.25, 300.5)
    assert parsed.skipped == {"no UUID label": 1}


def test_device_keys_in_device_order_whatever_their_mix():
    """GPUs alone, MIG instances alone, and a GPU's own key beside its instances' (which do not
    compare as they are): the order of ``_device_order`` every time."""
    import random

    from gpuledger.domain import dcgm as dcgm_module

    rng = random.Random(3)
    mixed = 0
    for _ in range(2000):
        keys = {(f"GPU-{rng.randrange(6)}", rng.choice([None, None, 0, 1, 2, 7, 13])) for _ in range(rng.randrange(1, 9))}
        per_gpu = dict.fromkeys(keys, {})
        got = dcgm_module._device_keys(per_gpu)
        assert got == sorted(per_gpu, key=dcgm_module._device_order)
        mixed += any((u, None) in keys and any(k[0] == u and k[1] is not None for k in keys) for u, _ in keys)
    assert mixed > 100
