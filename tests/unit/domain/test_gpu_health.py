"""Health facts from dcgm-exporter scrapes (units, MIG instances, blanks, both clock-event
spellings) and the incidents folded from them (XID by code class, DBE, row remapping,
sustained throttling)."""

from dataclasses import replace
from pathlib import Path

import pytest

from gpuledger.domain.dcgm import parse_exposition
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.gpu_health import health_facts
from gpuledger.domain.gpu_incidents import HealthFold, xid_severity

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
POS = SourcePos("t.source.dcgm", 0, 7)
MIB = 1024 * 1024


def facts(text: str, t_ms: int = 1_000):
    return {(f.gpu_uuid, f.gpu_instance_id): f for f in health_facts("c1", "gpu-node-1", t_ms, text, POS)}


def test_a_real_format_scrape_with_health_fields_gives_one_fact_per_gpu_in_units():
    text = (FIXTURES / "dcgm-metrics-health-h100.constructed.txt").read_text()
    got = facts(text)
    busy = got[("GPU-bc5610b9-79c8-fedd-8899-07539c7f868a", None)]
    assert (busy.node, busy.model, busy.pci_bus_id) == ("gpu-node-1", "NVIDIA H100 80GB HBM3", "00000000:64:00.0")
    assert (busy.gpu_temp_c, busy.memory_temp_c) == (47.0, 52.0)
    assert (busy.fb_total_bytes, busy.fb_free_bytes, busy.fb_used_bytes, busy.fb_reserved_bytes) == (
        81559 * MIB, 6071 * MIB, 74940 * MIB, 548 * MIB)
    assert (busy.ecc_sbe_volatile_total, busy.ecc_dbe_volatile_total, busy.ecc_sbe_aggregate_total) == (2, 0, 17)
    assert (busy.remapped_rows_correctable, busy.remapped_rows_uncorrectable, busy.row_remap_failure) == (1, 0, 0)
    assert busy.clock_event_reasons == 0x4 and busy.pcie_replays_total == 3 and busy.nvlink_replay_errors_total == 1
    assert busy.power_violation_s == pytest.approx(1.25) and busy.thermal_violation_s == 0.0  # ns -> s
    assert busy.xid_last == 0 and (busy.src_topic, busy.src_offset) == ("t.source.dcgm", 7)
    assert len(got) == 2
    # the attribution parse of the same scrape is unchanged: health fields are not attribution fields
    assert len(parse_exposition(text).samples) == 2


def test_mig_instance_series_are_facts_of_the_instance_and_absent_fields_are_none():
    got = facts((FIXTURES / "dcgm-metrics-mig-a100.txt").read_text())
    parent = got[("GPU-34319582-d595-d1c7-d1d2-179bcfa61660", None)]
    instance = got[("GPU-34319582-d595-d1c7-d1d2-179bcfa61660", 13)]
    assert (parent.gpu_temp_c, parent.memory_temp_c, parent.fb_free_bytes) == (61.0, 69.0, 35690 * MIB)
    assert parent.ecc_dbe_volatile_total is None and parent.fb_total_bytes is None
    assert (instance.profile, instance.xid_last, instance.gpu_temp_c) == ("1g.5gb", 0, None)


def test_blanks_are_dropped_and_the_old_clock_event_spelling_is_read():
    text = ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} 9223372036854775794\n'
            'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-a"} 72\n'
            'DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-a"} NaN\n'
            'DCGM_FI_DEV_XID_ERRORS{gpu="0"} 79\n')  # no UUID: no device
    (f,) = facts(text).values()
    assert (f.gpu_temp_c, f.memory_temp_c, f.clock_event_reasons, f.xid_last) == (None, None, 72, None)
    assert facts("DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-a\"} 1980\n") == {}


def _scrape(t_ms: int, **values) -> object:
    base = {"DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0}
    base.update({f"DCGM_FI_DEV_{k}": v for k, v in values.items()})
    text = "".join(f'{k}{{gpu="0",UUID="GPU-a",Hostname="n1"}} {v}\n' for k, v in base.items())
    (f,) = facts(text, t_ms).values()
    return f


def _incidents(fold: HealthFold, *scrapes) -> list[tuple]:
    return [(i.observed_at_ms, i.kind, i.code, i.severity) for s in scrapes for i in fold.observe(s)]


def test_a_value_no_counter_reaches_is_not_stored_and_the_rest_of_the_device_is():
    # 10^13 MiB of framebuffer is 1.05e19 bytes: past the facts' 64-bit integers (a hostile scrape)
    text = ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 10000000000000\n'
            'DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a"} 1024\n'
            'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} inf\n')
    (f,) = facts(text).values()
    assert (f.fb_used_bytes, f.fb_free_bytes, f.gpu_temp_c) == (None, 1024 * MIB, None)


def test_health_series_are_read_in_the_attribution_pass_and_never_fail_the_scrape():
    ok = 'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} 0.25\n'
    text = (ok + 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} warm\n'  # no number: left out
            'DCGM_FI_DEV_MEMORY_TEMP{gpu="0",UUID="GPU-a",bad=unquoted} 50\n'  # labels refused: left out
            'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a"} 13 1700000000000\n'  # value and timestamp
            'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a"} 79\n')  # a repeat: the first wins
    parsed = parse_exposition(text)
    assert [s.sm_active_ratio for s in parsed.samples] == [0.25]
    (device,) = parsed.health
    assert (device.gpu_uuid, parsed.health[device]) == ("GPU-a", {"xid_last": 13})
    (f,) = facts(text).values()
    assert (f.xid_last, f.gpu_temp_c, f.memory_temp_c) == (13, None, None)
    assert health_facts("c1", "gpu-node-1", 1_000, parsed, POS) == health_facts("c1", "gpu-node-1", 1_000, text, POS)
    with pytest.raises(ValueError):  # what is not exposition is refused for both readings
        health_facts("c1", "gpu-node-1", 1_000, ok + 'DCGM_FI_DEV_GPU_TEMP{gpu="0"\n', POS)


def test_xid_incident_on_each_new_code_with_severity_by_class():
    fold = HealthFold()
    got = _incidents(fold, _scrape(0), _scrape(10, XID_ERRORS=13), _scrape(20, XID_ERRORS=13),
                     _scrape(30, XID_ERRORS=79), _scrape(40, XID_ERRORS=79))
    assert got == [(10, "xid", 13, "warning"), (30, "xid", 79, "critical")]
    assert [xid_severity(c)[0] for c in (48, 63, 64, 74, 79, 94, 95)] == ["critical"] * 7
    assert [xid_severity(c)[0] for c in (13, 31, 43, 999)] == ["warning"] * 4
    assert xid_severity(79)[1] == "GPU has fallen off the bus"


def test_dbe_row_remap_and_sustained_throttle_incidents():
    fold = HealthFold(throttle_min_ms=60_000)
    got = _incidents(
        fold, _scrape(0), _scrape(10_000, ECC_DBE_VOL_TOTAL=1), _scrape(20_000, ECC_DBE_VOL_TOTAL=1),
        _scrape(30_000, ECC_DBE_VOL_TOTAL=1, UNCORRECTABLE_REMAPPED_ROWS=2, ROW_REMAP_FAILURE=1),
        _scrape(40_000, ECC_DBE_VOL_TOTAL=1, ROW_REMAP_FAILURE=1, UNCORRECTABLE_REMAPPED_ROWS=2,
                CLOCKS_EVENT_REASONS=0x40 | 0x4),
        _scrape(90_000, ECC_DBE_VOL_TOTAL=1, ROW_REMAP_FAILURE=1, UNCORRECTABLE_REMAPPED_ROWS=2,
                CLOCKS_EVENT_REASONS=0x40),
        _scrape(100_000, ECC_DBE_VOL_TOTAL=1, ROW_REMAP_FAILURE=1, UNCORRECTABLE_REMAPPED_ROWS=2,
                CLOCKS_EVENT_REASONS=0x40),
        _scrape(110_000, ECC_DBE_VOL_TOTAL=1, ROW_REMAP_FAILURE=1, UNCORRECTABLE_REMAPPED_ROWS=2,
                CLOCKS_EVENT_REASONS=0x4))  # SW power cap alone: ordinary
    assert got == [(10_000, "ecc_dbe", 1, "critical"), (30_000, "row_remap_failure", 1, "critical"),
                   (30_000, "row_remap_pending", 2, "warning"), (100_000, "thermal_throttle", 0x40, "warning")]


def test_a_dbe_already_counted_at_the_first_sample_is_an_incident_and_the_fold_survives_a_checkpoint():
    fold = HealthFold()
    assert _incidents(fold, _scrape(0, ECC_DBE_VOL_TOTAL=3, XID_ERRORS=48)) == [
        (0, "xid", 48, "critical"), (0, "ecc_dbe", 3, "critical")]
    again = HealthFold(state=__import__("json").loads(__import__("json").dumps(fold.state)))
    assert _incidents(again, _scrape(10, ECC_DBE_VOL_TOTAL=3, XID_ERRORS=48)) == []


def test_incident_ids_are_deterministic_and_point_at_their_health_fact():
    first = HealthFold().observe(_scrape(5, XID_ERRORS=79))
    second = HealthFold().observe(_scrape(5, XID_ERRORS=79))
    assert first == second and first[0].health_fact_id == _scrape(5, XID_ERRORS=79).fact_id
    assert replace(first[0], fact_id="") != first[0]


def _two_gpus(t_ms: int, reasons_a: int, reasons_b: int) -> list:
    text = "".join(f'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{gpu="{i}",UUID="{uuid}"}} {reasons}\n'
                   for i, (uuid, reasons) in enumerate((("GPU-a", reasons_a), ("GPU-b", reasons_b))))
    return sorted(facts(text, t_ms).values(), key=lambda f: f.gpu_uuid)


def test_power_throttling_held_past_the_threshold_is_one_incident_on_its_gpu_and_a_shorter_one_none():
    fold = HealthFold(throttle_min_ms=60_000)
    brake, slowdown, sw_cap = 0x80, 0x8, 0x4
    # GPU-a: HW power brake from 0 s to 120 s; GPU-b: HW slowdown for 50 s, then the SW power cap
    # (ordinary) for the rest
    timeline = [(0, brake, slowdown), (30_000, brake, slowdown), (50_000, brake | sw_cap, sw_cap),
                (60_000, brake, sw_cap), (90_000, brake, sw_cap), (120_000, brake, sw_cap)]
    got = [i for t, a, b in timeline for f in _two_gpus(t, a, b) for i in fold.observe(f)]
    assert len(got) == 1
    (i,) = got
    assert (i.gpu_uuid, i.node, i.gpu_instance_id) == ("GPU-a", "gpu-node-1", None)
    assert (i.observed_at_ms, i.kind, i.code, i.severity) == (60_000, "power_throttle", brake, "warning")
    assert i.detail == "HW_POWER_BRAKE for 60 s"
    # the episode ends when the reason clears: held again past the threshold, it is a new incident
    again = [(i.gpu_uuid, i.observed_at_ms, i.kind) for t, a in ((130_000, 0), (140_000, slowdown),
                                                                 (200_000, slowdown))
             for f in _two_gpus(t, a, 0) for i in fold.observe(f)]
    assert again == [("GPU-a", 200_000, "power_throttle")]


def test_a_device_s_unchanged_inputs_skip_the_fold_and_give_what_a_full_fold_gives():
    """The fold skips a fact whose inputs equal the device's last fully folded ones (no throttle bit
    held): held to a fold that folds every fact in full, over sequences that mostly repeat, with
    values reset, missing, rising and throttling, on GPUs and MIG instances, and a checkpoint."""
    import json
    import random
    rng = random.Random(1313)
    fields = ("xid_last", "ecc_dbe_volatile_total", "ecc_dbe_aggregate_total", "row_remap_failure",
              "remapped_rows_uncorrectable", "clock_event_reasons")
    choices = {"xid_last": (None, 0, 0, 13, 79), "ecc_dbe_volatile_total": (None, 0, 1, 2),
               "ecc_dbe_aggregate_total": (None, 0, 3, 4), "row_remap_failure": (None, 0, 1, 2),
               "remapped_rows_uncorrectable": (None, 0, 1, 5),
               "clock_event_reasons": (None, 0, 0x4, 0x8, 0x20, 0x80, 0x4 | 0x40)}
    base = _scrape(0)
    devices = [("GPU-a", None), ("GPU-b", None), ("GPU-a", 1), ("GPU-a", 2)]
    skipped = 0
    for _run in range(60):
        quick, full = HealthFold(throttle_min_ms=20_000), HealthFold(throttle_min_ms=20_000)
        last = {d: {n: rng.choice(choices[n]) for n in fields} for d in devices}
        for step in range(120):
            device = rng.choice(devices)
            if rng.random() < 0.25:  # most scrapes repeat the last values
                last[device][rng.choice(fields)] = None if rng.random() < 0.1 else rng.choice(choices[rng.choice(fields)])
            f = replace(base, gpu_uuid=device[0], gpu_instance_id=device[1], observed_at_ms=step * 7_000,
                        fact_id=f"h{step}", **last[device])
            full._quiet.clear()  # every fact folded in full
            state_before = json.dumps(quick.state, sort_keys=True)
            got, want = quick.observe(f), full.observe(f)
            assert got == want, (step, f)
            assert quick.state == full.state
            skipped += json.dumps(quick.state, sort_keys=True) == state_before and got == []
            if step == 60:  # a restored fold folds in full again and gives the same
                quick = HealthFold(throttle_min_ms=20_000, state=json.loads(json.dumps(quick.state)))
    assert skipped > 3000
