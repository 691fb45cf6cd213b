"""``nvidia-smi`` text on a vGPU host -> the host's vGPUs and its GPUs' UUIDs.

``parse_vgpu_query`` reads ``nvidia-smi vgpu -q``: "Key : Value" lines nested by indentation,
one ``GPU <bus id>`` block per physical GPU holding ``Active vGPUs : N`` and N ``vGPU ID : n``
blocks (VM UUID, VM Name, vGPU Name, vGPU Type, vGPU UUID, MDEV UUID, GPU Instance ID,
FB Memory Usage, Utilization, ...). Header lines some drivers print first (the NVSMI LOG banner,
Timestamp, Driver Version, ...) are skipped. ``N/A`` and empty values read as "not known".

``parse_gpu_uuids`` reads ``nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader``.

Bus ids are compared in one spelling, ``DDDDDDDD:BB:DD.F`` in upper case (``normalize_bus_id``):
nvidia-smi prints ``00000000:01:00.0`` in both commands, sysfs and lspci print ``0000:01:00.0``.

Identities, when the driver leaves fields empty (a VM whose guest driver is not loaded yet shows
an empty vGPU UUID; on KVM the VM UUID can be empty too):
- a vGPU is its vGPU UUID, else its MDEV UUID, else ``<bus id>/<vGPU ID>``;
- a VM is its VM UUID (``VM ID`` where the hypervisor prints a numeric id), else its VM Name.
A VM Name like ``win10test,debug-threads=on`` is QEMU's ``-name`` argument: the name is the part
before the first unescaped comma (QEMU doubles a literal comma), without a ``guest=`` prefix.

The profile is the vGPU Name without its leading vendor word: ``NVIDIA A100-4C`` and
``GRID A100-4C`` are profile ``A100-4C``, the key of the inventory's ``vgpu_profile_weights``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["NvidiaSmiError", "VgpuRecord", "normalize_bus_id", "parse_gpu_uuids", "parse_vgpu_query",
           "profile_of", "qemu_vm_name"]


class NvidiaSmiError(ValueError):
    """The text is not the nvidia-smi output it should be (the message names the line)."""


@dataclass(frozen=True)
class VgpuRecord:
    bus_id: str  # physical GPU, normalized
    vgpu_id: str  # the driver's vGPU instance id ("vGPU ID"), unique on the host while it lives
    vgpu_name: str  # as printed: "NVIDIA A100-4C"
    profile: str  # vendor word stripped: "A100-4C"
    vgpu_type: str = ""
    vgpu_uuid: str = ""  # as printed; "" when empty or N/A
    mdev_uuid: str = ""
    vm_uuid: str = ""  # VM UUID, else VM ID; "" when empty or N/A
    vm_name: str = ""  # QEMU options cut off
    vm_name_printed: str = ""
    gpu_instance_id: int | None = None  # MIG-backed vGPU
    fb_total_mib: int | None = None
    fb_used_mib: int | None = None
    gpu_util_pct: int | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)  # other top-level fields, as printed

    @property
    def vgpu_identity(self) -> str:
        return self.vgpu_uuid or self.mdev_uuid or f"{self.bus_id}/{self.vgpu_id}"

    @property
    def vm_identity(self) -> str:
        return self.vm_uuid or self.vm_name


@dataclass
class _Node:
    line_no: int
    indent: int
    key: str
    value: str | None  # None: a heading ("FB Memory Usage"), "" : an empty value ("VM UUID : ")
    children: list[_Node] = field(default_factory=list)

    def find(self, *keys: str) -> _Node | None:
        wanted = {k.casefold() for k in keys}
        return next((c for c in self.children if c.key.casefold() in wanted), None)

    def value_of(self, *keys: str) -> str:
        node = self.find(*keys)
        return _known(node.value) if node is not None and node.value is not None else ""


_SEP = re.compile(r"\s:(?:\s|$)")
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+$")
_GPU = re.compile(r"^GPU\s+(\S+)$")
_BUS = re.compile(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])$")
_LEADING_INT = re.compile(r"^(\d+)\b")
_QEMU_OPTION = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*=")
_VENDOR_WORDS = ("NVIDIA", "GRID")


def _known(value: str) -> str:
    return "" if value.strip() in ("", "N/A") else value.strip()


def _int_of(value: str) -> int | None:
    m = _LEADING_INT.match(_known(value))
    return int(m.group(1)) if m else None


def normalize_bus_id(text: str) -> str:
    """``0000:b1:00.0`` / ``00000000:B1:00.0`` / ``b1:00.0`` -> ``00000000:B1:00.0``."""
    m = _BUS.match(text.strip())
    if not m:
        raise NvidiaSmiError(f"{text!r} is not a PCI bus id (domain:bus:device.function, like 00000000:01:00.0)")
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{function}"


def profile_of(vgpu_name: str) -> str:
    """``NVIDIA RTXA6000-2Q`` -> ``RTXA6000-2Q``; ``GRID V100D-8Q`` -> ``V100D-8Q``."""
    name = vgpu_name.strip()
    first, _, rest = name.partition(" ")
    return rest.strip() if first.upper() in _VENDOR_WORDS and rest.strip() else name


def qemu_vm_name(printed: str) -> str:
    """The VM's name out of a QEMU ``-name`` argument (``guest=web1,debug-threads=on`` -> ``web1``);
    a name whose comma is not followed by QEMU options is kept as printed."""
    parts, current, i = [], [], 0
    while i < len(printed):
        if printed[i] == ",":
            if printed[i + 1:i + 2] == ",":
                current.append(",")
                i += 2
                continue
            parts.append("".join(current))
            current = []
        else:
            current.append(printed[i])
        i += 1
    parts.append("".join(current))
    if len(parts) > 1 and all(_QEMU_OPTION.match(p) for p in parts[1:]):
        return parts[0].removeprefix("guest=")
    return printed


def _tree(text: str) -> list[_Node]:
    roots: list[_Node] = []
    stack: list[_Node] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.expandtabs(8).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        m = _SEP.search(body)
        if m:
            key, value = body[:m.start()].strip(), body[m.end():].strip()
        else:
            key, value = body, None
        node = _Node(line_no, indent, key, value)
        while stack and stack[-1].indent >= indent:
            stack.pop()
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)
    return roots


def _check_headings(nodes: list[_Node]) -> None:
    """A line without " : " must be a heading with lines under it (or the NVSMI LOG banner):
    anything else (a table border, "No devices were found", an error message) is not this format."""
    for node in nodes:
        if node.value is None and not node.children and not _BANNER.match(node.key) and not (
                node.indent == 0 and _GPU.match(node.key)):
            raise NvidiaSmiError(f"line {node.line_no}: {node.key!r} is neither 'Key : Value' nor a heading "
                                 "with fields under it: is this `nvidia-smi vgpu -q` output?")
        _check_headings(node.children)


def parse_vgpu_query(text: str) -> list[VgpuRecord]:
    """The vGPUs of one ``nvidia-smi vgpu -q`` output, GPU by GPU in printed order.
    Raises ``NvidiaSmiError`` (naming the line) for text of another format, for a GPU block whose
    ``Active vGPUs`` count differs from its ``vGPU ID`` blocks (a cut-off output), and for a vGPU
    without a vGPU Name."""
    roots = _tree(text)
    _check_headings(roots)
    stray = next((node for node in roots if node.key.casefold() == "vgpu id"), None)
    if stray is not None:
        raise NvidiaSmiError(f"line {stray.line_no}: 'vGPU ID' outside a 'GPU <bus id>' block")
    gpus = [(node, m) for node in roots if node.value is None and (m := _GPU.match(node.key))]
    if not gpus:
        raise NvidiaSmiError("line 1: no 'GPU <bus id>' block: is this `nvidia-smi vgpu -q` output "
                             "(on the hypervisor host, with the vGPU manager driver loaded)?")
    out: list[VgpuRecord] = []
    seen_bus: set[str] = set()
    for node, m in gpus:
        try:
            bus_id = normalize_bus_id(m.group(1))
        except NvidiaSmiError as exc:
            raise NvidiaSmiError(f"line {node.line_no}: {exc}") from None
        if bus_id in seen_bus:
            raise NvidiaSmiError(f"line {node.line_no}: GPU {bus_id} is printed twice")
        seen_bus.add(bus_id)
        out.extend(_gpu_vgpus(node, bus_id))
    return out


def _gpu_vgpus(gpu: _Node, bus_id: str) -> list[VgpuRecord]:
    blocks = [c for c in gpu.children if c.key.casefold() == "vgpu id"]
    active = gpu.find("Active vGPUs")
    if active is None or active.value is None:
        raise NvidiaSmiError(f"line {gpu.line_no}: GPU {bus_id} has no 'Active vGPUs : N' line")
    count = _int_of(active.value)
    if count is None:
        raise NvidiaSmiError(f"line {active.line_no}: Active vGPUs {active.value!r} is not a number")
    if count != len(blocks):
        raise NvidiaSmiError(f"line {active.line_no}: GPU {bus_id} says {count} active vGPUs but lists "
                             f"{len(blocks)} 'vGPU ID' blocks: the output is cut off or mixed")
    records, seen = [], set()
    for block in blocks:
        vgpu_id = _known(block.value or "")
        if not vgpu_id:
            raise NvidiaSmiError(f"line {block.line_no}: 'vGPU ID' has no value")
        if vgpu_id in seen:
            raise NvidiaSmiError(f"line {block.line_no}: vGPU ID {vgpu_id} is printed twice under GPU {bus_id}")
        seen.add(vgpu_id)
        name = block.value_of("vGPU Name")
        if not name:
            raise NvidiaSmiError(f"line {block.line_no}: vGPU {vgpu_id} on GPU {bus_id} has no 'vGPU Name' "
                                 "(its profile)")
        fb = block.find("FB Memory Usage")
        util = block.find("Utilization")
        vm_printed = block.value_of("VM Name")
        records.append(VgpuRecord(
            bus_id=bus_id, vgpu_id=vgpu_id, vgpu_name=name, profile=profile_of(name),
            vgpu_type=block.value_of("vGPU Type"), vgpu_uuid=block.value_of("vGPU UUID"),
            mdev_uuid=block.value_of("MDEV UUID"), vm_uuid=block.value_of("VM UUID", "VM ID"),
            vm_name=qemu_vm_name(vm_printed), vm_name_printed=vm_printed,
            gpu_instance_id=_int_of(block.value_of("GPU Instance ID")),
            fb_total_mib=_int_of(fb.value_of("Total")) if fb else None,
            fb_used_mib=_int_of(fb.value_of("Used")) if fb else None,
            gpu_util_pct=_int_of(util.value_of("Gpu")) if util else None,
            extra={c.key: c.value for c in block.children if c.value is not None}))
    return records


def parse_gpu_uuids(csv_text: str) -> dict[str, str]:
    """``00000000:01:00.0, GPU-5d…`` lines -> {normalized bus id: GPU UUID}. A header line
    (``pci.bus_id, uuid``, printed without ``noheader``) is skipped."""
    out: dict[str, str] = {}
    for line_no, raw in enumerate(csv_text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.replace(" ", "").casefold() == "pci.bus_id,uuid":
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2:
            raise NvidiaSmiError(f"line {line_no}: {line!r} is not 'bus id, uuid': run nvidia-smi with "
                                 "--query-gpu=pci.bus_id,uuid --format=csv,noheader")
        try:
            bus_id = normalize_bus_id(fields[0])
        except NvidiaSmiError as exc:
            raise NvidiaSmiError(f"line {line_no}: {exc}") from None
        if not fields[1].startswith("GPU-"):
            raise NvidiaSmiError(f"line {line_no}: {fields[1]!r} is not a GPU UUID (GPU-…)")
        if out.get(bus_id, fields[1]) != fields[1]:
            raise NvidiaSmiError(f"line {line_no}: bus id {bus_id} is listed twice with different UUIDs")
        out[bus_id] = fields[1]
    return out
