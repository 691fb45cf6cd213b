"""dcgm-exporter health and thermal fields -> one health fact per GPU (or MIG instance) and scrape.

The fields are dcgm-exporter's documented counters (its ``etc/default-counters.csv`` and
``dcp-metrics-included.csv``; DCGM's ``dcgm_fields.h`` for ``DCGM_FI_DEV_FB_TOTAL`` and the
clock-event field, renamed from ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` to
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` in DCGM 3.3: both spellings are read). Units normalized
here, once: framebuffer MiB -> bytes, violation counters ns -> s, temperatures stay degrees C,
counts stay counts, the clock-event field stays DCGM's bitmask (``CLOCK_EVENT_BITS``).

DCGM's "not supported" sentinels and NaN are dropped field by field, as in ``domain/dcgm.py``
(which parses the attribution fields of the same scrape; these series are "not an attribution
field" there). A device with none of these fields gets no health fact. MIG-instance series
(``GPU_I_ID``) are facts of that GPU instance under the parent's UUID, never of the parent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gpuledger.domain.dcgm import _FP64_BLANK, _SENTINEL_MIN
from gpuledger.domain.facts import SourcePos, built, fact_id

__all__ = ["CLOCK_EVENT_BITS", "HEALTH_FIELDS", "GpuHealthFact", "health_facts", "parse_health"]

_MIB = 1024 * 1024
_INT64_LIMIT = float(2 ** 63)  # the facts' integer columns are Avro longs
# exporter series -> (fact field, scale to the fact's unit, integer?)
HEALTH_FIELDS: dict[str, tuple[str, float, bool]] = {
    "DCGM_FI_DEV_XID_ERRORS": ("xid_last", 1, True),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_sbe_volatile_total", 1, True),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_dbe_volatile_total", 1, True),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_sbe_aggregate_total", 1, True),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_dbe_aggregate_total", 1, True),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_rows_correctable", 1, True),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_rows_uncorrectable", 1, True),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row_remap_failure", 1, True),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", 1, True),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", 1, True),
    "DCGM_FI_DEV_GPU_TEMP": ("gpu_temp_c", 1, False),
    "DCGM_FI_DEV_MEMORY_TEMP": ("memory_temp_c", 1, False),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replays_total", 1, True),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_crc_flit_errors_total", 1, True),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": ("nvlink_crc_data_errors_total", 1, True),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": ("nvlink_replay_errors_total", 1, True),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": ("nvlink_recovery_errors_total", 1, True),
    "DCGM_FI_DEV_FB_TOTAL": ("fb_total_bytes", _MIB, True),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_bytes", _MIB, True),
    "DCGM_FI_DEV_FB_USED": ("fb_used_bytes", _MIB, True),
    "DCGM_FI_DEV_FB_RESERVED": ("fb_reserved_bytes", _MIB, True),
    "DCGM_FI_DEV_POWER_VIOLATION": ("power_violation_s", 1e-9, False),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("thermal_violation_s", 1e-9, False),
}
# DCGM_CLOCKS_EVENT_REASON_* (dcgm_fields.h; NVML's nvmlClocksEventReason* bits)
CLOCK_EVENT_BITS = {"GPU_IDLE": 0x1, "CLOCKS_SETTING": 0x2, "SW_POWER_CAP": 0x4, "HW_SLOWDOWN": 0x8,
                    "SYNC_BOOST": 0x10, "SW_THERMAL": 0x20, "HW_THERMAL": 0x40, "HW_POWER_BRAKE": 0x80,
                    "DISPLAY_CLOCKS": 0x100}
_VALUE_FIELDS = sorted({f for f, _, _ in HEALTH_FIELDS.values()})


@dataclass(frozen=True)
class GpuHealthFact:
    """One device's health and thermal fields at one scrape (None: not reported, or a DCGM blank)."""

    fact_id: str
    cluster_id: str
    node: str
    gpu_uuid: str  # the physical GPU
    gpu_instance_id: int | None  # the MIG GPU instance the series were about (GPU_I_ID), None for the GPU
    profile: str  # GPU_I_PROFILE of a MIG instance, empty otherwise
    model: str
    pci_bus_id: str
    observed_at_ms: int
    xid_last: int | None  # the last XID error DCGM saw (a gauge: 0 until the first)
    ecc_sbe_volatile_total: int | None
    ecc_dbe_volatile_total: int | None
    ecc_sbe_aggregate_total: int | None
    ecc_dbe_aggregate_total: int | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    row_remap_failure: int | None  # 1 when the row remapper failed
    clock_event_reasons: int | None  # bitmask of CLOCK_EVENT_BITS
    gpu_temp_c: float | None
    memory_temp_c: float | None
    pcie_replays_total: int | None
    nvlink_crc_flit_errors_total: int | None
    nvlink_crc_data_errors_total: int | None
    nvlink_replay_errors_total: int | None
    nvlink_recovery_errors_total: int | None
    fb_total_bytes: int | None
    fb_free_bytes: int | None
    fb_used_bytes: int | None
    fb_reserved_bytes: int | None
    power_violation_s: float | None  # time throttled by power since boot
    thermal_violation_s: float | None
    src_topic: str
    src_partition: int
    src_offset: int


@dataclass(frozen=True)
class _Device:
    gpu_uuid: str
    gpu_instance_id: int | None
    profile: str
    model: str
    pci_bus_id: str


_labels_cache: dict[str, _Device | None] = {}
_CACHE_MAX = 100_000


def _device(name: str, label_text: str) -> _Device | None:
    """The device a label set names (None without a UUID or with a non-numeric GPU_I_ID)."""
    if label_text in _labels_cache:
        return _labels_cache[label_text]
    try:
        labels = list(text_string_to_metric_families(f"{name}{label_text} 0\n"))[0].samples[0].labels
    except Exception:  # noqa: BLE001 — domain/dcgm.py already refused a scrape that is not exposition
        labels = {}
    uuid = labels.get("UUID") or labels.get("gpu_uuid") or ""
    instance = labels.get("GPU_I_ID")
    found = None
    if uuid and (instance is None or instance.isdigit()):
        found = _Device(uuid, None if instance is None else int(instance), labels.get("GPU_I_PROFILE", ""),
                        labels.get("modelName", ""), labels.get("pci_bus_id", ""))
    if len(_labels_cache) >= _CACHE_MAX:
        _labels_cache.clear()
    _labels_cache[label_text] = found
    return found


def _blank(value: float) -> bool:
    return math.isnan(value) or abs(value) >= _SENTINEL_MIN or _FP64_BLANK <= value < _FP64_BLANK + 16


def parse_health(text: str) -> dict[_Device, dict[str, float | int]]:
    """Device -> its health fields in the fact's units, from one scrape (first series of a
    device wins: time-slicing repeats a GPU's series per sharing pod)."""
    out: dict[_Device, dict[str, float | int]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace < 0:
            continue  # no labels, no device
        spec = HEALTH_FIELDS.get(line[:brace])
        if spec is None:
            continue
        close = line.rfind("}")
        parts = line[close + 1:].split()
        if close < brace or not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        device = _device(line[:brace], line[brace:close + 1])
        if device is None or _blank(value) or value < 0:
            continue
        field, scale, integer = spec
        scaled = value * scale
        if not math.isfinite(scaled) or (integer and scaled >= _INT64_LIMIT):
            continue  # a hostile or corrupt value no counter reaches: not stored (it would not fit the fact)
        fields = out.setdefault(device, {})
        if field not in fields:
            fields[field] = int(round(scaled)) if integer else scaled
    return out


def health_facts(cluster_id: str, node: str, observed_at_ms: int, text: str, pos: SourcePos) -> list[GpuHealthFact]:
    """The scrape's health facts, devices in (UUID, instance) order."""
    facts = []
    parsed = parse_health(text)
    for device in sorted(parsed, key=lambda d: (d.gpu_uuid, -1 if d.gpu_instance_id is None else d.gpu_instance_id)):
        values = parsed[device]
        row = {"fact_id": fact_id("health", cluster_id, device.gpu_uuid, device.gpu_instance_id, observed_at_ms),
               "cluster_id": cluster_id, "node": node, "gpu_uuid": device.gpu_uuid,
               "gpu_instance_id": device.gpu_instance_id, "profile": device.profile, "model": device.model,
               "pci_bus_id": device.pci_bus_id, "observed_at_ms": observed_at_ms}
        row.update((f, values.get(f)) for f in _FIELD_ORDER)
        row.update(src_topic=pos.topic, src_partition=pos.partition, src_offset=pos.offset)
        facts.append(built(GpuHealthFact, row))
    return facts


_FIELD_ORDER = [f for f in GpuHealthFact.__dataclass_fields__ if f in _VALUE_FIELDS]
