"""The approved GPU inventory: which physical GPUs exist, where, in which mode, and when
they were unavailable. Entries are effective-dated ``[valid_from, valid_to)``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["GpuEntry", "Inventory", "InventoryError", "MigDevice", "Unavailability", "default_mig_weight",
           "parse_inventory"]


class InventoryError(ValueError):
    """inventory.json does not have the documented shape."""


def default_mig_weight(profile: str) -> float:
    """Compute slices / 7, read from the profile name (``3g.40gb`` -> 3/7)."""
    head = profile.split("g.", 1)[0]
    if not head.isdigit():
        raise InventoryError(f"MIG profile {profile!r} does not start with '<slices>g.'")
    return int(head) / 7


@dataclass(frozen=True)
class MigDevice:
    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(frozen=True)
class GpuEntry:
    gpu_uuid: str
    node: str
    model: str
    gpu_class: str
    mode: str
    valid_from_ms: int
    valid_to_ms: int | None
    timeslice_replicas: int = 1
    mig_devices: tuple[MigDevice, ...] = ()

    def covers(self, t_ms: int) -> bool:
        return self.valid_from_ms <= t_ms and (self.valid_to_ms is None or t_ms < self.valid_to_ms)


@dataclass(frozen=True)
class Unavailability:
    gpu_uuid: str
    from_ms: int
    to_ms: int
    reason: str


@dataclass
class Inventory:
    gpus: list[GpuEntry] = field(default_factory=list)
    unavailable: list[Unavailability] = field(default_factory=list)
    mig_profile_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    vgpu_profile_weights: dict[str, float] = field(default_factory=dict)
    _index: tuple | None = field(default=None, repr=False, compare=False)
    _unavailable_index: tuple | None = field(default=None, repr=False, compare=False)

    def vgpu_weight(self, profile: str) -> float | None:
        """The approved share of a physical GPU for a vGPU profile; None when not approved."""
        weight = self.vgpu_profile_weights.get(profile)
        return None if weight is None else float(weight)

    def mig_weight(self, gpu_class: str, profile: str) -> float:
        """The approved weight of a MIG profile on a GPU class; default compute slices / 7."""
        weight = self.mig_profile_weights.get(gpu_class, {}).get(profile)
        return float(weight) if weight is not None else default_mig_weight(profile)

    def mig_device(self, mig_uuid: str, t_ms: int) -> tuple[GpuEntry, MigDevice] | None:
        for g in self.gpus:
            if g.covers(t_ms):
                for m in g.mig_devices:
                    if m.mig_uuid == mig_uuid:
                        return g, m
        return None

    def gpus_on(self, node: str, t_ms: int) -> list[GpuEntry]:
        return [g for g in self.on_node(node) if g.covers(t_ms)]

    def on_node(self, node: str) -> tuple[GpuEntry, ...]:
        """Every entry of a node's (or vGPU host's) GPUs, whenever valid, in document order."""
        return self._indexes()[1].get(node, ())

    def node_end_ms(self, node: str) -> int | None:
        """When the node's last GPU leaves the inventory; None while any stays (or none is known).
        Asked for every record of a node: worked out once per node and version of the index."""
        ends = self._indexes_ends()
        if node not in ends:
            gpus = [g.valid_to_ms for g in self.on_node(node)]
            ends[node] = None if not gpus or None in gpus else max(gpus)
        return ends[node]

    def gpu(self, gpu_uuid: str, t_ms: int) -> GpuEntry | None:
        for g in self._by_uuid().get(gpu_uuid, ()):
            if g.covers(t_ms):
                return g
        return None

    def by_uuid(self) -> dict[str, list[GpuEntry]]:
        """Every entry of every GPU, by UUID, in document order (read it, never change it)."""
        return self._by_uuid()

    def entries(self, gpu_uuid: str) -> list[GpuEntry]:
        """Every entry of a GPU, whenever valid."""
        return list(self._by_uuid().get(gpu_uuid, ()))

    def _by_uuid(self) -> dict[str, list[GpuEntry]]:
        return self._indexes()[0]

    def _indexes(self) -> tuple[dict[str, list[GpuEntry]], dict[str, tuple[GpuEntry, ...]]]:
        """(entries by GPU UUID, entries by node), rebuilt whenever ``gpus`` is replaced or grows,
        so a lookup per record costs the node's GPUs, not the fleet's."""
        if self._index is None or self._index[0] is not self.gpus or self._index[1] != len(self.gpus):
            by_uuid: dict[str, list[GpuEntry]] = {}
            by_node: dict[str, list[GpuEntry]] = {}
            for g in self.gpus:
                by_uuid.setdefault(g.gpu_uuid, []).append(g)
                by_node.setdefault(g.node, []).append(g)
            self._index = (self.gpus, len(self.gpus), by_uuid, {n: tuple(gs) for n, gs in by_node.items()}, {}, {})
        return self._index[2], self._index[3]

    def derived(self) -> dict:
        """A memo of what is worked out from one entry (domain/units.py ``units_of``), emptied
        with the index: keys are the callers', values live as long as the entries do."""
        self._indexes()
        return self._index[5]

    def _indexes_ends(self) -> dict[str, int | None]:
        """node -> ``node_end_ms``, as far as worked out for the index in force."""
        self._indexes()
        return self._index[4]

    def unavailable_windows(self, gpu_uuid: str, from_ms: int, to_ms: int) -> list[Unavailability]:
        """The GPU's maintenance windows that overlap ``[from_ms, to_ms)``, in document order.
        Asked per GPU and segment: the windows are indexed by GPU (rebuilt whenever
        ``unavailable`` is replaced or grows), so a lookup costs the GPU's windows."""
        index = self._unavailable_index
        if index is None or index[0] is not self.unavailable or index[1] != len(self.unavailable):
            by_uuid: dict[str, list[Unavailability]] = {}
            for u in self.unavailable:
                by_uuid.setdefault(u.gpu_uuid, []).append(u)
            index = self._unavailable_index = (self.unavailable, len(self.unavailable), by_uuid)
        return [u for u in index[2].get(gpu_uuid, ()) if u.from_ms < to_ms and from_ms < u.to_ms]


def parse_inventory(doc: dict) -> Inventory:
    """inventory.json -> Inventory; raises InventoryError naming the bad entry."""
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise InventoryError("inventory must be an object with a 'gpus' list")
    weights = doc.get("mig_profile_weights") or {}
    if not isinstance(weights, dict) or not all(isinstance(v, dict) for v in weights.values()):
        raise InventoryError("mig_profile_weights must map GPU class -> {profile: weight}")
    vgpu_weights = doc.get("vgpu_profile_weights") or {}
    if not isinstance(vgpu_weights, dict):
        raise InventoryError("vgpu_profile_weights must map vGPU profile -> weight")
    inv = Inventory(mig_profile_weights={c: {p: float(w) for p, w in ws.items()} for c, ws in weights.items()},
                    vgpu_profile_weights={p: float(w) for p, w in vgpu_weights.items()})
    for i, g in enumerate(doc["gpus"]):
        if not isinstance(g, dict):
            raise InventoryError(f"gpus[{i}] must be an object, got {g!r}")
        try:
            mode = str(g.get("mode") or "exclusive")
            if mode not in ("exclusive", "mig", "timeslice", "vgpu"):
                raise ValueError(f"mode must be exclusive, mig, timeslice or vgpu, got {mode!r}")
            migs = tuple(MigDevice(str(m["mig_uuid"]), str(m["profile"]), int(m["gpu_instance_id"]),
                                   int(m.get("compute_instance_id") or 0)) for m in g.get("mig_devices") or [])
            for m in migs:
                default_mig_weight(m.profile)
            replicas = int(g.get("timeslice_replicas") or 1)
            if replicas < 1:
                raise ValueError("timeslice_replicas must be at least 1")
            inv.gpus.append(GpuEntry(
                gpu_uuid=str(g["gpu_uuid"]), node=str(g["node"]), model=str(g.get("model") or ""),
                gpu_class=str(g.get("gpu_class") or g.get("model") or "unknown"), mode=mode,
                valid_from_ms=parse_rfc3339_ms(g["valid_from"]) if g.get("valid_from") else 0,
                valid_to_ms=parse_rfc3339_ms(g["valid_to"]) if g.get("valid_to") else None,
                timeslice_replicas=replicas if mode == "timeslice" else 1, mig_devices=migs,
            ))
        except InventoryError as exc:
            raise InventoryError(f"gpus[{i}]: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise InventoryError(f"gpus[{i}]: {exc!r}; each GPU needs gpu_uuid, node and RFC 3339 valid_from") from exc
    unavailable = doc.get("unavailable") or []
    if not isinstance(unavailable, list) or not all(isinstance(u, dict) for u in unavailable):
        raise InventoryError("unavailable must be a list of objects {gpu_uuid, from, to, reason}")
    for i, u in enumerate(unavailable):
        try:
            inv.unavailable.append(Unavailability(str(u["gpu_uuid"]), parse_rfc3339_ms(u["from"]),
                                                  parse_rfc3339_ms(u["to"]), str(u.get("reason") or "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise InventoryError(f"unavailable[{i}]: {exc!r}; each entry needs gpu_uuid, from, to") from exc
    _close_superseded(inv)
    return inv


def _close_superseded(inv: Inventory) -> None:
    """A later entry for the same GPU closes the earlier one (re-partitioning, mode changes)."""
    by_gpu: dict[str, list[GpuEntry]] = {}
    for g in inv.gpus:
        by_gpu.setdefault(g.gpu_uuid, []).append(g)
    closed = []
    for entries in by_gpu.values():
        entries.sort(key=lambda e: e.valid_from_ms)
        for cur, nxt in zip(entries, entries[1:]):
            if cur.valid_to_ms is None or cur.valid_to_ms > nxt.valid_from_ms:
                cur = replace(cur, valid_to_ms=nxt.valid_from_ms)
            closed.append(cur)
        closed.append(entries[-1])
    inv.gpus = closed
