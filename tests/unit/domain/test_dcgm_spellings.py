"""dcgm-exporter label spellings (old ``Hostname``/``UUID``, newer ``hostname``/``gpu_uuid``),
unit normalization and DCGM blank sentinels, on real scrapes and the newer exporter's layout."""

from pathlib import Path

import pytest

from gpuledger.domain.dcgm import parse_exposition

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
SCRAPES = sorted(p.name for p in FIXTURES.glob("*.txt"))


def _respell(text: str) -> str:
    return text.replace(',UUID="', ',gpu_uuid="').replace('{UUID="', '{gpu_uuid="').replace('Hostname="', 'hostname="')


@pytest.mark.parametrize("name", SCRAPES)
def test_a_real_scrape_parses_the_same_under_either_spelling(name):
    text = (FIXTURES / name).read_text()
    respelled = _respell(text)
    assert 'UUID="' not in respelled and "Hostname=" not in respelled  # the rewrite really happened
    old, new = parse_exposition(text), parse_exposition(respelled)
    assert old.samples and old.samples == new.samples
    assert (old.series_parsed, old.skipped) == (new.series_parsed, new.skipped)


NEWER_EXPORTER = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",gpu_uuid="GPU-n0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 37
DCGM_FI_DEV_GPU_UTIL{gpu="1",gpu_uuid="GPU-n1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 140737488355328
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",gpu_uuid="GPU-n0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 1024
DCGM_FI_DEV_FB_USED{gpu="1",gpu_uuid="GPU-n1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 9223372036854775794
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",gpu_uuid="GPU-n0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 250.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",gpu_uuid="GPU-n1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 1.4073748835533e+14
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",gpu_uuid="GPU-n0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} 123456789
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",gpu_uuid="GPU-n1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"} NaN
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",gpu_uuid="GPU-n0",device="nvidia0",GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",hostname="node-a"} 0.25
"""


def test_newer_exporter_units_normalized_and_every_sentinel_dropped():
    parsed = parse_exposition(NEWER_EXPORTER)
    by = {(s.gpu_uuid, s.gpu_instance_id): s for s in parsed.samples}
    gpu0 = by[("GPU-n0", None)]
    assert gpu0.sm_active_ratio == pytest.approx(0.37)  # percent -> ratio
    assert gpu0.fb_used_bytes == 1024 * 1024 * 1024  # MiB -> bytes
    assert gpu0.power_w == pytest.approx(250.5)
    assert gpu0.energy_j == pytest.approx(123456.789)  # mJ -> J
    assert gpu0.model == "NVIDIA H100 80GB HBM3"
    assert by[("GPU-n0", 2)].sm_active_ratio == 0.25  # the MIG instance, under the parent's gpu_uuid
    # GPU 1 reported only blanks: the fp64 blank 2^47 (as an integer and in exponent form: not
    # supported = blank + 2), the int64 blank and NaN; none of them becomes a value
    assert ("GPU-n1", None) not in by
    assert parsed.skipped == {"DCGM blank sentinel": 4}
    assert parsed.series_parsed == 5


@pytest.mark.parametrize("value", ["140737488355328", "140737488355343", "9223372036854775792",
                                   "9223372036854775807", "NaN", "+Inf"])
def test_blank_sentinels_dropped(value):
    parsed = parse_exposition(f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-a",Hostname="n"}} {value}\n')
    assert parsed.samples == [] and parsed.skipped == {"DCGM blank sentinel": 1}


@pytest.mark.parametrize("value, joules", [("140737488355327", 140737488355.327), ("140737488355344", 140737488355.344),
                                           ("699.9", 0.6999)])
def test_values_next_to_the_fp64_blank_are_kept(value, joules):
    (s,) = parse_exposition(
        f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",gpu_uuid="GPU-a",hostname="n"}} {value}\n').samples
    assert s.energy_j == pytest.approx(joules)


@pytest.mark.parametrize("name, value, reason", [
    ("DCGM_FI_DEV_FB_USED", "1e13", "implausible framebuffer used (not in [0, 2^50) bytes)"),  # * 2^20 overflows Int64
    ("DCGM_FI_DEV_FB_USED", "-1", "implausible framebuffer used (not in [0, 2^50) bytes)"),
    ("DCGM_FI_DEV_POWER_USAGE", "140737488355327", "implausible power (not in [0, 100000) W)"),
    ("DCGM_FI_DEV_POWER_USAGE", "-3.5", "implausible power (not in [0, 100000) W)"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "-1", "implausible energy (negative or not finite)"),
])
def test_implausible_values_are_skipped_with_their_reason(name, value, reason):
    parsed = parse_exposition(f'{name}{{gpu="0",UUID="GPU-a"}} {value}\nDCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="GPU-a"}} 0.5\n')
    (s,) = parsed.samples
    assert s.sm_active_ratio == 0.5 and s.fb_used_bytes is None and s.power_w is None and s.energy_j is None
    assert parsed.skipped == {reason: 1}


def test_largest_plausible_framebuffer_is_kept():
    (s,) = parse_exposition('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 1073741823\n').samples
    assert s.fb_used_bytes == (2 ** 30 - 1) * 2 ** 20 < 2 ** 63
