"""dcgm-exporter ``/metrics`` (Prometheus text) -> per-GPU device samples.

Units normalized here, once: framebuffer MiB -> bytes, energy mJ -> J, ``*_UTIL`` percent
-> ratio. DCGM's "not supported" sentinels (~9.22e18 and friends) and NaN are dropped, and
so is a value no GPU can report (``_PLAUSIBLE``: framebuffer bytes outside [0, 2^50), power
outside [0, 10^5) W, negative energy): counted as a skipped series, never stored.
MIG-instance series carry the parent's UUID plus ``GPU_I_ID`` (no MIG UUID): they become
samples of that GPU instance (``gpu_instance_id``), never of the parent.

The same pass reads the health and thermal series (``HEALTH_FIELDS``, the facts are built in
domain/gpu_health.py) into ``DcgmParse.health``: one walk over the scrape's lines, one cache
entry per series for both readings. A health series never makes the scrape fail: a value or a
label set it cannot read is left out of the health fields (and judged as before by the
attribution reading, which refuses a malformed attribution series).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import NamedTuple

from gpuledger.domain.facts import built
from gpuledger.domain.prom_labels import parse_labels

__all__ = ["HEALTH_FIELDS", "DcgmParse", "DeviceSample", "HealthDevice", "parse_exposition", "row_of", "sample_of"]

_SENTINEL_MIN = 9.0e15  # int64 blanks: 0x7ffffffffffffff0 + 0..15 (blank, not found, not supported, ...)
_FP64_BLANK = 2.0 ** 47  # fp64 blanks: 140737488355328.0 + 0..15 (SM active, power)
_FIELDS = {
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_active",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
}


@dataclass(frozen=True, slots=True)  # (slots: built and read in C without a dict per sample)
class DeviceSample:
    gpu_uuid: str
    gpu_instance_id: int | None
    sm_active_ratio: float | None
    fb_used_bytes: int | None
    power_w: float | None
    energy_j: float | None
    model: str = ""  # modelName label: "GRID A100-40C" inside a vGPU guest
    per_pod: tuple = ()  # ((namespace, pod, SM-active ratio), ...) when sharing pods' series differ


_MIB = 1024 * 1024
# exporter series -> (health fact field, scale to the fact's unit, integer?)
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
_INT64_LIMIT = float(2 ** 63)  # the health facts' integer columns are Avro longs


class HealthDevice(NamedTuple):
    """The device a health series is about (its label set): a tuple, so that keying a scrape's
    health fields by it hashes in C (a frozen dataclass hashes in Python, line after line)."""

    gpu_uuid: str
    gpu_instance_id: int | None
    profile: str
    model: str
    pci_bus_id: str


_SAMPLE_FIELDS = tuple(DeviceSample.__dataclass_fields__)


def sample_of(row) -> DeviceSample:
    """The sample of a row of its fields in order (how attribution checkpoints hold queued
    samples; a shorter row, from state written before the later fields existed, takes their
    defaults)."""
    return DeviceSample(*row)


def row_of(sample: DeviceSample) -> list:
    """A sample as a row of its fields in order (``sample_of``'s inverse)."""
    return [getattr(sample, name) for name in _SAMPLE_FIELDS]


@dataclass(frozen=True)
class DcgmParse:
    samples: list[DeviceSample]
    series_parsed: int
    skipped: dict[str, int]  # reason -> series count; parsed + skipped = every series of the scrape
    # device -> its health fields in the fact's units (first series of a device wins)
    health: dict[HealthDevice, dict[str, float | int]] = dc_field(default_factory=dict, compare=False)


class _Generations:
    """A cache that keeps what is in use: lookups go to the young generation, then the old one
    (a hit there moves the entry back to the young); ``rotate`` makes the young the old and
    starts an empty young, so an entry not used for a whole generation is dropped. Series
    carry pod labels: over a day of pod churn the distinct series seen grow with the hours,
    the ones in use do not."""

    def __init__(self) -> None:
        self.young: dict = {}
        self.old: dict = {}
        self.kept = 0  # entries moved back from the old generation: in use in both
        self.kept_before = 0  # the same count of the generation before

    def find(self, key):
        """The entry of ``key`` in either generation, None when neither has it."""
        found = self.young.get(key)
        return found if found is not None else self.from_old(key)

    def from_old(self, key):
        """The old generation's entry of ``key``, moved back to the young one (None if absent)."""
        found = self.old.get(key)
        if found is not None:
            self.young[key] = found
            self.kept += 1
        return found

    def rotate(self) -> None:
        self.old, self.young = self.young, {}
        self.kept_before, self.kept = self.kept, 0


_SERIES = _Generations()  # series text (name and label set) -> _series
_LABELS = _Generations()  # label set text -> _identity
_HEALTH = _Generations()  # label set text -> (_health_device,)
_CACHE_MAX = 200_000  # entries of a young generation, whatever the lines: rotated at this size
_LINES_PER_SERIES = 16  # a generation lasts this many lines per series in use (each seen ~16 times)
_MIN_SERIES = 1024  # the least a generation is sized for (none in use yet, or all of them new)
_lines_since_rotation = 0
_REPEATED = "repeated series of the same device (one per sharing pod)"
_BLANK = "DCGM blank sentinel"
_RATIO_FIELDS = {"sm_active": 1.0, "gr_active": 1.0, "gpu_util_pct": 0.01}
# field -> [low, high) of a value a GPU can report, in the exporter's units
_PLAUSIBLE = {"fb_used_mib": (0.0, 2.0 ** 30, "implausible framebuffer used (not in [0, 2^50) bytes)"),
              "power_w": (0.0, 1e5, "implausible power (not in [0, 100000) W)"),
              "energy_mj": (0.0, math.inf, "implausible energy (negative or not finite)")}
_ANY = (-math.inf, math.inf, "")


def _identity(name: str, label_text: str) -> tuple:
    """(device key, modelName, skip reason, (namespace, pod) or None) of a label set, parsed
    once per distinct label text (shared by a device's fields)."""
    found = _LABELS.find(label_text)
    if found is None:
        labels = parse_labels(name, label_text)
        uuid = labels.get("UUID") or labels.get("gpu_uuid") or ""
        instance = labels.get("GPU_I_ID")
        if not uuid:
            found = (None, "", "no UUID label", None)
        elif instance is not None and not instance.isdigit():
            found = (None, "", "GPU_I_ID not a number", None)
        else:
            pod = (labels["namespace"], labels["pod"]) if labels.get("pod") and labels.get("namespace") else None
            found = ((uuid, None if instance is None else int(instance)), labels.get("modelName", ""), "", pod)
        _LABELS.young[label_text] = found
    return found


def _health_device(name: str, label_text: str) -> HealthDevice | None:
    """The device a health series names (None without a UUID, with a non-numeric GPU_I_ID or
    with a label set the parser refuses)."""
    cached = _HEALTH.find(label_text)
    if cached is not None:
        return cached[0]
    try:
        labels = parse_labels(name, label_text)
    except Exception:  # noqa: BLE001 — a health series never fails the scrape
        labels = {}
    uuid = labels.get("UUID") or labels.get("gpu_uuid") or ""
    instance = labels.get("GPU_I_ID")
    found = None
    if uuid and (instance is None or instance.isdigit()):
        found = HealthDevice(uuid, None if instance is None else int(instance), labels.get("GPU_I_PROFILE", ""),
                             labels.get("modelName", ""), labels.get("pci_bus_id", ""))
    _HEALTH.young[label_text] = (found,)
    return found


def _series(series: str, brace: int) -> tuple:
    """(field, device key, modelName, skip reason, (namespace, pod) or None, plausible low,
    high, implausible reason, ratio field?, health) of one series, cached: series repeat
    verbatim scrape after scrape. A series without labels is ``name{}``. ``health``: (health
    field, scale, integer?, device) of a health series naming a device, else None."""
    name, label_text = series[:brace], series[brace:]
    field = _FIELDS.get(name)
    spec = HEALTH_FIELDS.get(name)
    device = None if spec is None else _health_device(name, label_text)
    health = None if device is None else (*spec, device)
    if field is None:
        found = (None, None, "", f"not an attribution field: {name}", None, 0.0, 0.0, "", False, health)
    else:
        low, high, implausible = _PLAUSIBLE.get(field, _ANY)
        found = (field, *_identity(name, label_text), low, high, implausible, field in _RATIO_FIELDS, health)
    _SERIES.young[series] = found
    return found


def _age_caches(lines: int) -> None:
    """Count a scrape's lines; rotate the caches once a generation has lasted its lines (or
    the young one is full), so they hold the series of the last generation or two. The series
    in use are those used in two generations in a row (each one appears once a scrape, so a
    generation of 16 lines per series sees each ~16 times); new series that never come again
    (pods that ended) do not lengthen a generation."""
    global _lines_since_rotation
    _lines_since_rotation += lines
    in_use = max(_SERIES.kept, _SERIES.kept_before, _MIN_SERIES)
    if _lines_since_rotation >= _LINES_PER_SERIES * in_use or len(_SERIES.young) >= _CACHE_MAX:
        for cache in (_SERIES, _LABELS, _HEALTH):
            cache.rotate()
        _TEMPLATES.clear()  # (their lines' series are the last generation's)
        _lines_since_rotation = 0


def _per_pod(by_field: dict[str, dict[tuple, float]]) -> tuple:
    """Per-pod evidence: the sharing pods' series disagree (identical repeats carry none)."""
    for field_name, scale in _RATIO_FIELDS.items():
        values = by_field.get(field_name)
        if values:
            if len(values) < 2 or len(set(values.values())) < 2:
                return ()
            return tuple((ns, pod, min(max(v * scale, 0.0), 1.0)) for (ns, pod), v in sorted(values.items()))
    return ()


def _value(rest: str, line: str) -> float:
    parts = rest.split()
    if not parts:
        raise ValueError(f"sample without a value: {line[:120]!r}")
    return float(parts[0])


def _lenient(rest: str) -> float | None:
    """A health series' value, None where there is none to read."""
    parts = rest.split()
    try:
        return float(parts[0]) if parts else None
    except ValueError:
        return None


def _unterminated(line: str) -> None:
    raise ValueError(f"unterminated label set: {line[:120]!r}")


def _miss(series: str, brace: int, rest: str, line: str) -> tuple:
    """The info of a series not in the caches (the value is read before the labels, as on a hit)."""
    if series[:brace] in _FIELDS:
        _value(rest, line)
    return _series(series, brace)


try:  # built at install (pyproject.toml); a source tree without the build walks in Python
    from gpuledger.domain import _dcgm_walk
except ImportError:  # pragma: no cover — tests/unit/domain/test_dcgm_walk.py requires it
    _c_walk = _c_samples = _c_walk_samples = None
else:
    _dcgm_walk.setup(_miss, _value, _lenient, _unterminated, _REPEATED, _BLANK, _SENTINEL_MIN,
                     _FP64_BLANK, _FP64_BLANK + 16, _INT64_LIMIT)
    _c_walk, _c_samples, _c_walk_samples = _dcgm_walk.walk_text, _dcgm_walk.samples, _dcgm_walk.walk_samples
    _Template = _dcgm_walk.Template
_TEMPLATES: dict = {}  # a source's (node's) last scrape: emptied when the caches rotate


def parse_exposition(text: str, source=None) -> DcgmParse:
    """Parse one scrape. Raises ValueError if the text is not Prometheus exposition.
    ``source``: what the scrape is of (a cluster's node), whose last scrape this one is met
    with line by line (domain/_dcgm_template.c): the same parse, with fewer lookups."""
    per_gpu: dict[tuple[str, int | None], dict[str, float]] = {}
    models: dict[tuple[str, int | None], str] = {}
    pod_values: dict[tuple, dict[str, dict[tuple, float]]] = {}  # key -> field -> pod -> value
    health_out: dict[HealthDevice, dict[str, float | int]] = {}
    skipped: dict[str, int] = {}
    if _c_walk_samples is not None:  # the walk with the scrape's devices held in C, then their samples
        template = None if source is None else _TEMPLATES.get(source)
        if template is None and source is not None:
            template = _TEMPLATES[source] = _Template()
        walked = _c_walk_samples(text, _SERIES.young, _SERIES.from_old, health_out, skipped, _per_pod, DeviceSample,
                                 template)
        if walked is not None:
            samples, parsed, lines_walked = walked
            _age_caches(lines_walked)
            return built(DcgmParse, {"samples": samples, "series_parsed": parsed, "skipped": skipped,
                                     "health": health_out})
        health_out.clear()  # a value the devices in C do not hold: the walk again, into dicts
        skipped.clear()
    if _c_walk is None:
        lines = text.splitlines()
        _age_caches(len(lines))  # before the walk: a rotation never happens between two lines of a scrape
        from gpuledger.domain.dcgm_reference import _walk  # (the walk in Python: a source tree without the build)
        parsed = _walk(lines, _SERIES.young, _SERIES.from_old, per_gpu, models, pod_values, health_out, skipped)
    else:  # the same walk over the same lines, in C, without making them
        parsed, lines_walked = _c_walk(text, _SERIES.young, _SERIES.from_old, per_gpu, models, pod_values, health_out,
                                       skipped)
        _age_caches(lines_walked)  # after the walk, between two scrapes too
    keys = _device_keys(per_gpu)
    samples = None if _c_samples is None else _c_samples(keys, per_gpu, models, pod_values, _per_pod, DeviceSample)
    if samples is None:
        from gpuledger.domain.dcgm_reference import _samples  # (a value the samples in C leave to Python)
        samples = _samples(keys, per_gpu, models, pod_values)
    # (built: a frozen __init__ a scrape is ~1 us)
    return built(DcgmParse, {"samples": samples, "series_parsed": parsed, "skipped": skipped, "health": health_out})


def _device_order(key: tuple[str, int | None]) -> tuple[str, int]:
    return key[0], -1 if key[1] is None else key[1]


def _device_keys(per_gpu: dict) -> list[tuple[str, int | None]]:
    """The device keys in ``_device_order``. The keys sorted as they are give that order
    without a Python call per key wherever they can be compared: a GPU's own key (None) beside
    one of its MIG instances (an int) cannot, and those take the key function."""
    try:
        return sorted(per_gpu)
    except TypeError:
        return sorted(per_gpu, key=_device_order)
