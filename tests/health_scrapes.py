"""DCGM health series added to a capture's scrapes, in dcgm-exporter's exposition format (the
field names and HELP texts of its default counters; values as
tests/fixtures/dcgm/dcgm-metrics-health-h100.constructed.txt), with faults injected at
chosen times: the truth the health tests check is set here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from gpuledger.domain.timeutil import parse_rfc3339_ms

FAMILIES = [  # (series, type, help, healthy value)
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "44"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "51"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "0"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "0"),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons.", "0"),
    ("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).", "81559"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "40000"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "548"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.", "0"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", "0"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors.",
     "0"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors", "0"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", "0"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "0"),
]
_LABELS = re.compile(r'^DCGM_FI_DEV_GPU_UTIL(\{[^}]*UUID="([^"]+)"[^}]*\})', re.M)


@dataclass(frozen=True)
class Fault:
    gpu_uuid: str
    series: str
    value: str
    from_ms: int
    to_ms: int | None = None  # None: for good (a counter that rose stays risen)


@dataclass
class HealthScrapes:
    faults: list[Fault] = field(default_factory=list)
    skip: set[str] = field(default_factory=set)  # GPUs the exporter does not see at all
    extra: dict[str, str] = field(default_factory=dict)  # node -> label set of a device only DCGM knows

    def value(self, uuid: str, series: str, healthy: str, t_ms: int) -> str:
        for f in self.faults:
            if f.gpu_uuid == uuid and f.series == series and f.from_ms <= t_ms and (f.to_ms is None or t_ms < f.to_ms):
                return f.value
        return healthy

    def exposition(self, node: str, text: str, t_ms: int) -> str:
        devices = [(labels, uuid) for labels, uuid in _LABELS.findall(text) if uuid not in self.skip]
        if node in self.extra:
            devices.append((self.extra[node], re.search(r'UUID="([^"]+)"', self.extra[node]).group(1)))
        out = [line for line in text.rstrip("\n").split("\n") if not any(f'UUID="{u}"' in line for u in self.skip)]
        for name, kind, help_text, healthy in FAMILIES:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            out += [f"{name}{labels} {self.value(uuid, name, healthy, t_ms)}" for labels, uuid in devices]
        return "\n".join(out) + "\n"

    def rewrite(self, capture: Path) -> int:
        """Add the health series to every scrape of ``capture``; returns the scrapes rewritten."""
        path = capture / "dcgm.jsonl"
        lines = []
        for raw in path.read_bytes().splitlines():
            rec = orjson.loads(raw)
            rec["exposition"] = self.exposition(rec["node"], rec["exposition"], parse_rfc3339_ms(rec["observed_at"]))
            lines.append(orjson.dumps(rec))
        path.write_bytes(b"\n".join(lines) + b"\n")
        return len(lines)
