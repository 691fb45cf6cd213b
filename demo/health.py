"""The health and thermal series dcgm-exporter adds to a generated scrape, and faults on them.

The field names, types and HELP texts are dcgm-exporter's (its ``etc/default-counters.csv``;
``DCGM_FI_DEV_FB_TOTAL`` from DCGM's ``dcgm_fields.h``), the ones ``domain/gpu_health.py``
reads. Values are plausible for an H100 80GB HBM3 and follow the device's load, without a
random draw (a plan's other data stays the same with or without them):

- temperatures rise with the busiest series of the device (a MIG GPU runs as hot as its
  busiest instance); memory (HBM) runs 7 C above the GPU;
- clock-event reasons: ``GPU_IDLE`` when nothing runs, ``SW_POWER_CAP`` above 85 % SM-active;
- ECC single-bit, correctable remapped rows, PCIe replays and NVLink CRC counts are small
  constants per GPU (from its UUID); double-bit, uncorrectable rows and row-remap failure 0;
- framebuffer: the GPU's total (a MIG instance's from its profile, a vGPU's from its profile's
  size), 548 MiB reserved on a physical GPU, free = total - reserved - used (never below 0);
- power-violation time grows since ``boot_ms`` at a per-GPU share of wall time (0-0.2 %),
  thermal-violation time only during a ``SW_THERMAL`` fault window.

``HealthFault``s replace a series' value on one GPU in ``[from_ms, to_ms)`` (``to_ms`` None:
for good, as a counter that rose stays risen); the demo's XID 79 and double-bit ECC error are
faults. Time is an argument; nothing here reads a clock.

A real exporter writes every configured family on every scrape; the demo writes these on the
scrapes at whole multiples of ``every_ms`` (a minute) only, which keeps a day's capture near
its size without them (they are four times the attribution families' bytes). The scrapes
in between carry framebuffer-used alone, as before.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["FAMILIES", "DeviceHealth", "HealthFault", "HealthSeries"]

FAMILIES = [  # (series, type, help) in the order the exporter writes them
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
     "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)"),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
]
FB_TOTAL_MIB = 81559  # an H100 80GB HBM3 as DCGM reports it
FB_RESERVED_MIB = 548
SW_POWER_CAP, GPU_IDLE, SW_THERMAL = 0x4, 0x1, 0x20
_SIZE = re.compile(r"(\d+)(?:gb|C)$")  # 3g.40gb (MIG), A100-20C (vGPU: 20 GB)
_WHOLE = re.compile(r"(\d+)GB")  # NVIDIA A100-SXM4-40GB


@dataclass(frozen=True)
class HealthFault:
    gpu_uuid: str
    series: str  # a FAMILIES name
    value: int
    from_ms: int
    to_ms: int | None = None


@dataclass(frozen=True)
class DeviceHealth:
    """What one series of a device says besides the attribution fields."""

    gpu_uuid: str
    load: float  # the device's busiest SM-active ratio in this scrape
    fb_used_mib: int  # what the attribution series say (DCGM_FI_DEV_FB_USED)
    profile: str = ""  # a MIG instance's GPU_I_PROFILE
    model: str = ""


@lru_cache(maxsize=4096)
def _unit(gpu_uuid: str, salt: str) -> int:
    return int(hashlib.sha256(f"{gpu_uuid}/{salt}".encode()).hexdigest()[:8], 16)


@dataclass(frozen=True)
class HealthSeries:
    boot_ms: int  # the exporter's counters count from here (the driver loaded)
    faults: tuple[HealthFault, ...] = ()
    every_ms: int = 60_000  # on the scrapes at multiples of this (the demo's capture stays small)

    def due(self, t_ms: int) -> bool:
        return t_ms % self.every_ms == 0

    def _fault(self, gpu_uuid: str, series: str, t_ms: int) -> int | None:
        for f in self.faults:
            if (f.gpu_uuid == gpu_uuid and f.series == series and f.from_ms <= t_ms
                    and (f.to_ms is None or t_ms < f.to_ms)):
                return f.value
        return None

    def _thermal_ns(self, gpu_uuid: str, t_ms: int) -> int:
        spent = sum(max(0, min(t_ms, f.to_ms if f.to_ms is not None else t_ms) - f.from_ms)
                    for f in self.faults if f.gpu_uuid == gpu_uuid and f.series == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
                    and f.value & SW_THERMAL)
        return spent * 1_000_000

    def values(self, d: DeviceHealth, t_ms: int) -> dict[str, int]:
        """Series name -> value for one device at ``t_ms``."""
        u = d.gpu_uuid
        size = _SIZE.search(d.profile or d.model.removeprefix("GRID "))
        whole = _WHOLE.search(d.model)
        total = (int(size.group(1)) * 1024 - 256 if size and (d.profile or d.model.startswith("GRID "))
                 else FB_TOTAL_MIB if "H100 80GB" in d.model or not whole else int(whole.group(1)) * 1024)
        reserved = 0 if d.profile else FB_RESERVED_MIB
        temp = 31 + round(45 * d.load) + _unit(u, "temp") % 4
        clocks = GPU_IDLE if d.load == 0 else SW_POWER_CAP if d.load > 0.85 else 0
        out = {
            "DCGM_FI_DEV_GPU_TEMP": temp, "DCGM_FI_DEV_MEMORY_TEMP": temp + 7,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": clocks,
            "DCGM_FI_DEV_POWER_VIOLATION": max(0, t_ms - self.boot_ms) * 1_000_000 * (_unit(u, "pwr") % 21) // 10_000,
            "DCGM_FI_DEV_THERMAL_VIOLATION": self._thermal_ns(u, t_ms),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": _unit(u, "pcie") % 4, "DCGM_FI_DEV_XID_ERRORS": 0,
            "DCGM_FI_DEV_FB_TOTAL": total, "DCGM_FI_DEV_FB_FREE": max(0, total - reserved - d.fb_used_mib),
            "DCGM_FI_DEV_FB_RESERVED": reserved,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": _unit(u, "sbe") % 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": _unit(u, "sbe-agg") % 40, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": _unit(u, "rows") % 3,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": _unit(u, "flit") % 5 // 3,
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 0, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 0,
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 0,
        }
        for name in out:
            fault = self._fault(u, name, t_ms)
            if fault is not None:
                out[name] = fault
        return out
