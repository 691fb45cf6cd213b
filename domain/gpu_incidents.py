"""Health incidents: events with a severity, folded from one device's health facts in scrape order.

- **XID**: ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last XID the driver reported, so
  an incident is a change of that value to a non-zero code (the first sample of a device
  showing a code counts: nothing older is known). The same code raised twice in a row is one
  incident: the gauge cannot tell them apart. Severity by NVIDIA's Xid catalog
  (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "Resolution Bucket"): codes
  whose action is a GPU reset, node reboot or hardware service are ``critical`` (48 DBE, 63/64
  row-remap or page-retirement event/failure, 74 NVLink, 79 fallen off the bus, 94/95
  contained/uncontained ECC, GSP and micro-controller errors); codes an application causes or
  recovers from by restarting (13 graphics engine exception, 31 memory page fault, 43 stopped
  processing, 45 preemptive cleanup) are ``warning``; an unknown code is ``warning``.
- **DBE**: the volatile double-bit ECC count rose (or is non-zero at the first sample: it
  counts since the driver loaded); the aggregate count rose where no volatile count is reported.
- **Row-remap failure**: ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` became 1 (critical); more
  uncorrectable remapped rows than at the previous sample: a reset is pending (warning).
- **Throttling**: a thermal (SW/HW thermal slowdown) or power (HW slowdown, HW power brake)
  clock-event reason held on consecutive samples for at least ``throttle_min_ms``: one incident
  per episode, at the sample that crossed the threshold. SW power capping is ordinary and no
  incident.

The fold's state is plain JSON (device key -> last values), kept in the attributor's
checkpoint; times are epoch ms and arguments, never a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.dcgm import DcgmParse
from gpuledger.domain.facts import SourcePos, fact_id
from gpuledger.domain.gpu_health import CLOCK_EVENT_BITS, GpuHealthFact, health_bodies, health_facts

__all__ = ["GpuHealthIncident", "HealthFold", "SEVERITIES", "xid_severity"]

SEVERITIES = ("critical", "warning")
_CRITICAL_XIDS = {48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
                  62: "internal micro-controller halt", 63: "ECC page retirement or row remapping recorded",
                  64: "ECC page retirement or row remapper recording failure", 74: "NVLink error",
                  79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
                  94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout",
                  120: "GSP error", 123: "SPI PMU RPC failure", 140: "unrecovered ECC error",
                  154: "GPU recovery action changed"}
_APPLICATION_XIDS = {13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
                     45: "preemptive cleanup, due to previous errors", 68: "NVDEC0 exception",
                     69: "graphics engine class error"}
_THERMAL = CLOCK_EVENT_BITS["SW_THERMAL"] | CLOCK_EVENT_BITS["HW_THERMAL"]
_POWER = CLOCK_EVENT_BITS["HW_SLOWDOWN"] | CLOCK_EVENT_BITS["HW_POWER_BRAKE"]
# what ``HealthFold.observe`` folds of a fact: these fields, then its clock-event bits in QUIET_MASK
# (None without the field); a fact with the same inputs as its device's last quiet one changes
# nothing (domain/_health_bodies.c leaves such facts unfolded by the same rule)
QUIET_INPUTS = ("xid_last", "ecc_dbe_volatile_total", "ecc_dbe_aggregate_total", "row_remap_failure",
                "remapped_rows_uncorrectable")
QUIET_MASK = _THERMAL | _POWER


def xid_severity(code: int) -> tuple[str, str]:
    """(severity, what the code means) of an XID."""
    if code in _CRITICAL_XIDS:
        return "critical", _CRITICAL_XIDS[code]
    return "warning", _APPLICATION_XIDS.get(code, "XID not in the classified set")


@dataclass(frozen=True)
class GpuHealthIncident:
    fact_id: str
    cluster_id: str
    node: str
    gpu_uuid: str
    gpu_instance_id: int | None
    observed_at_ms: int
    kind: str  # xid | ecc_dbe | row_remap_failure | row_remap_pending | thermal_throttle | power_throttle
    code: int  # the XID, the throttle bits, or the count that rose
    severity: str  # critical | warning
    detail: str
    health_fact_id: str
    src_topic: str
    src_partition: int
    src_offset: int


def _rose(now: int | None, before: int | None) -> bool:
    return now is not None and before is not None and now > before


class HealthFold:
    """Per-device last values; ``observe`` returns the incidents a new fact shows."""

    def __init__(self, throttle_min_ms: int = 60_000, state: dict | None = None) -> None:
        self.throttle_min_ms = throttle_min_ms
        self.state: dict[str, dict] = dict(state or {})
        # each device's inputs at its last full fold, when they held no throttle bit: the same inputs
        # again change nothing and raise nothing (a fold is idempotent then), so they are not folded
        # again; not kept in the checkpoint (a restored fold folds each device's next fact in full)
        self._quiet: dict[tuple[str, int | None], tuple] = {}

    def scrape(self, cluster_id: str, node: str, observed_at_ms: int, parsed: DcgmParse, pos: SourcePos,
               encoded: bool = False) -> tuple[list, list[GpuHealthIncident]]:
        """A scrape's health facts and the incidents they raise, folded. ``encoded``: the facts
        as their Avro bodies where the writer is set (``health_bodies``: only the devices that
        are not quiet are built as facts, for the fold; a quiet one's would change nothing)."""
        made = health_bodies(cluster_id, node, observed_at_ms, parsed, pos, self._quiet) if encoded else None
        if made is None:
            facts = folded = health_facts(cluster_id, node, observed_at_ms, parsed, pos)
        else:
            facts, folded = made
        incidents = []
        for fact in folded:
            incidents += self.observe(fact)
        return facts, incidents

    def observe(self, f: GpuHealthFact) -> list[GpuHealthIncident]:
        reasons = f.clock_event_reasons
        bits = None if reasons is None else reasons & QUIET_MASK
        inputs = (f.xid_last, f.ecc_dbe_volatile_total, f.ecc_dbe_aggregate_total, f.row_remap_failure,
                  f.remapped_rows_uncorrectable, bits)
        device = (f.gpu_uuid, f.gpu_instance_id)
        if not bits and self._quiet.get(device) == inputs:
            return []
        if bits:
            self._quiet.pop(device, None)  # a throttle episode depends on time: folded in full
        else:
            self._quiet[device] = inputs
        key = f"{f.gpu_uuid}/{'' if f.gpu_instance_id is None else f.gpu_instance_id}"
        st = self.state.setdefault(key, {})
        out: list[tuple[str, int, str, str]] = []  # (kind, code, severity, detail)
        if f.xid_last is not None:
            if f.xid_last != 0 and f.xid_last != st.get("xid"):
                severity, meaning = xid_severity(f.xid_last)
                out.append(("xid", f.xid_last, severity, f"XID {f.xid_last}: {meaning}"))
            st["xid"] = f.xid_last
        vol, agg = f.ecc_dbe_volatile_total, f.ecc_dbe_aggregate_total
        if vol is not None and vol > st.get("dbe_vol", 0):
            out.append(("ecc_dbe", vol, "critical", f"double-bit ECC errors since driver load: {vol}"))
        elif vol is None and _rose(agg, st.get("dbe_agg")):
            out.append(("ecc_dbe", agg, "critical", f"double-bit ECC errors, lifetime: {agg}"))
        for name, value in (("dbe_vol", vol), ("dbe_agg", agg)):
            if value is not None:
                st[name] = value
        if f.row_remap_failure is not None:
            if f.row_remap_failure and not st.get("remap_failed"):
                out.append(("row_remap_failure", 1, "critical", "row remapping failed: the GPU needs service"))
            st["remap_failed"] = int(bool(f.row_remap_failure))
        if _rose(f.remapped_rows_uncorrectable, st.get("remap_unc")):
            out.append(("row_remap_pending", f.remapped_rows_uncorrectable, "warning",
                        f"uncorrectable remapped rows now {f.remapped_rows_uncorrectable}: reset the GPU to apply"))
        if f.remapped_rows_uncorrectable is not None:
            st["remap_unc"] = f.remapped_rows_uncorrectable
        if f.clock_event_reasons is not None:
            for kind, mask in (("thermal_throttle", _THERMAL), ("power_throttle", _POWER)):
                out += self._throttle(st, kind, f.clock_event_reasons & mask, f.observed_at_ms)
        return [GpuHealthIncident(fact_id("incident", f.cluster_id, f.gpu_uuid, f.gpu_instance_id, kind, code,
                                          f.observed_at_ms),
                                  f.cluster_id, f.node, f.gpu_uuid, f.gpu_instance_id, f.observed_at_ms, kind, code,
                                  severity, detail, f.fact_id, f.src_topic, f.src_partition, f.src_offset)
                for kind, code, severity, detail in out]

    def _throttle(self, st: dict, kind: str, bits: int, t_ms: int) -> list[tuple[str, int, str, str]]:
        """One incident per episode of ``bits`` held for ``throttle_min_ms``; [since, fired] in state."""
        if not bits:
            st.pop(kind, None)
            return []
        since, fired = st.setdefault(kind, [t_ms, False])
        if fired or t_ms - since < self.throttle_min_ms:
            return []
        st[kind][1] = True
        names = "|".join(n for n, b in CLOCK_EVENT_BITS.items() if bits & b)
        return [(kind, bits, "warning", f"{names} for {(t_ms - since) / 1000:.0f} s")]


try:  # built at install (pyproject.toml), as domain/gpu_health.py's health_rows
    from gpuledger.domain import _health
except ImportError:  # pragma: no cover — tests/unit/domain/test_health_c.py requires it
    pass
else:
    _health.set_quiet(QUIET_INPUTS, QUIET_MASK)
