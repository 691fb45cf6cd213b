"""dcgm-exporter health and thermal fields -> one health fact per GPU (or MIG instance) and scrape.

The fields are dcgm-exporter's documented counters (its ``etc/default-counters.csv`` and
``dcp-metrics-included.csv``; DCGM's ``dcgm_fields.h`` for ``DCGM_FI_DEV_FB_TOTAL`` and the
clock-event field, renamed from ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` to
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` in DCGM 3.3: both spellings are read). Units normalized
here, once: framebuffer MiB -> bytes, violation counters ns -> s, temperatures stay degrees C,
counts stay counts, the clock-event field stays DCGM's bitmask (``CLOCK_EVENT_BITS``).

The series are read in domain/dcgm.py's one pass over a scrape (``HEALTH_FIELDS`` there, into
``DcgmParse.health``; they are "not an attribution field" to its attribution reading). DCGM's
"not supported" sentinels and NaN are dropped field by field, and so is a negative value or
one an Avro long cannot hold. A device with none of these fields gets no health fact. MIG-instance series
(``GPU_I_ID``) are facts of that GPU instance under the parent's UUID, never of the parent.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.dcgm import HEALTH_FIELDS, DcgmParse, HealthDevice, parse_exposition
from gpuledger.domain.facts import SourcePos, built, fact_id

__all__ = ["CLOCK_EVENT_BITS", "HEALTH_FIELDS", "GpuHealthFact", "health_bodies", "health_facts", "parse_health"]

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


def parse_health(text: str) -> dict[HealthDevice, dict[str, float | int]]:
    """Device -> its health fields in the fact's units, from one scrape (first series of a
    device wins: time-slicing repeats a GPU's series per sharing pod). Raises ValueError for
    text that is not exposition, as ``parse_exposition`` does: the health fields are read in
    its pass."""
    return parse_exposition(text).health


def health_facts(cluster_id: str, node: str, observed_at_ms: int, scrape: str | DcgmParse,
                 pos: SourcePos) -> list[GpuHealthFact]:
    """The scrape's health facts (from its text or its parse), devices in (UUID, instance) order."""
    parsed = (parse_exposition(scrape) if isinstance(scrape, str) else scrape).health
    return health_rows(parsed, _base(cluster_id, node, observed_at_ms, pos), cluster_id, observed_at_ms)


def health_bodies(cluster_id: str, node: str, observed_at_ms: int, parsed: DcgmParse, pos: SourcePos,
                  quiet: dict) -> tuple[list, list[GpuHealthFact]] | None:
    """The scrape's health facts as a worker writes them, where the C module and its writer are
    set (streams/fact_batches.py ``encode_fact_bodies``), else None: (each device's Avro body,
    or its fact where the writer is not sure of a value; the facts of the devices whose
    ``HealthFold`` with ``quiet`` as its ``_quiet`` must fold them), devices in the order of
    ``health_facts``. domain/_health_bodies.c."""
    if _health_bodies is None:
        return None
    return _health_bodies(parsed.health, cluster_id, node, observed_at_ms, pos, quiet)


def _base(cluster_id: str, node: str, observed_at_ms: int, pos: SourcePos) -> dict:
    """The scrape's row, every field in the fact's order; each device's copy fills in its own."""
    return {"fact_id": "", "cluster_id": cluster_id, "node": node, "gpu_uuid": "", "gpu_instance_id": None,
            "profile": "", "model": "", "pci_bus_id": "", "observed_at_ms": observed_at_ms, **_NO_VALUES,
            "src_topic": pos.topic, "src_partition": pos.partition, "src_offset": pos.offset}


def python_health_rows(parsed: dict[HealthDevice, dict], base: dict, cluster_id: str,
                       observed_at_ms: int) -> list[GpuHealthFact]:
    """A copy of ``base`` per device, with its id, identity and fields; ``health_rows`` is this
    in C where the C module is built (domain/_health.c)."""
    facts = []
    for device in sorted(parsed, key=lambda d: (d.gpu_uuid, -1 if d.gpu_instance_id is None else d.gpu_instance_id)):
        row = base.copy()
        row["fact_id"] = fact_id("health", cluster_id, device.gpu_uuid, device.gpu_instance_id, observed_at_ms)
        row["gpu_uuid"], row["gpu_instance_id"], row["profile"], row["model"], row["pci_bus_id"] = device
        row.update(parsed[device])  # only fields of _VALUE_FIELDS: the keys stay those of the fact
        facts.append(built(GpuHealthFact, row))
    return facts


_NO_VALUES = dict.fromkeys(f for f in GpuHealthFact.__dataclass_fields__ if f in _VALUE_FIELDS)

try:  # built at install (pyproject.toml); a source tree without the build builds them in Python
    from gpuledger.domain import _health
except ImportError:  # pragma: no cover — tests/unit/domain/test_health_c.py requires it
    health_rows, _health_bodies = python_health_rows, None
else:
    _health.setup(python_health_rows, GpuHealthFact, HealthDevice, fact_id)
    health_rows, _health_bodies = _health.health_rows, _health.health_bodies
