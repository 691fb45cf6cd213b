"""The approved GPU inventory: which physical GPUs exist, where, in which mode, and when
they were unavailable. Entries are effective-dated ``[valid_from, valid_to)``."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["GpuEntry", "Inventory", "InventoryError", "Unavailability", "parse_inventory"]


class InventoryError(ValueError):
    """inventory.json does not have the documented shape."""


@dataclass(frozen=True)
class GpuEntry:
    gpu_uuid: str
    node: str
    model: str
    gpu_class: str
    mode: str
    valid_from_ms: int
    valid_to_ms: int | None

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

    def gpus_on(self, node: str, t_ms: int) -> list[GpuEntry]:
        return [g for g in self.gpus if g.node == node and g.covers(t_ms)]

    def gpu(self, gpu_uuid: str, t_ms: int) -> GpuEntry | None:
        for g in self.gpus:
            if g.gpu_uuid == gpu_uuid and g.covers(t_ms):
                return g
        return None

    def unavailable_windows(self, gpu_uuid: str, from_ms: int, to_ms: int) -> list[Unavailability]:
        return [u for u in self.unavailable if u.gpu_uuid == gpu_uuid and u.from_ms < to_ms and from_ms < u.to_ms]


def parse_inventory(doc: dict) -> Inventory:
    """inventory.json -> Inventory; raises InventoryError naming the bad entry."""
    if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
        raise InventoryError("inventory must be an object with a 'gpus' list")
    inv = Inventory()
    for i, g in enumerate(doc["gpus"]):
        try:
            inv.gpus.append(GpuEntry(
                gpu_uuid=str(g["gpu_uuid"]), node=str(g["node"]), model=str(g.get("model", "")),
                gpu_class=str(g.get("gpu_class") or g.get("model") or "unknown"), mode=str(g.get("mode", "exclusive")),
                valid_from_ms=parse_rfc3339_ms(g["valid_from"]) if g.get("valid_from") else 0,
                valid_to_ms=parse_rfc3339_ms(g["valid_to"]) if g.get("valid_to") else None,
            ))
        except (KeyError, TypeError, ValueError) as exc:
            raise InventoryError(f"gpus[{i}]: {exc!r}; each GPU needs gpu_uuid, node and RFC 3339 valid_from") from exc
    for i, u in enumerate(doc.get("unavailable") or []):
        try:
            inv.unavailable.append(Unavailability(str(u["gpu_uuid"]), parse_rfc3339_ms(u["from"]),
                                                  parse_rfc3339_ms(u["to"]), str(u.get("reason", ""))))
        except (KeyError, TypeError, ValueError) as exc:
            raise InventoryError(f"unavailable[{i}]: {exc!r}; each entry needs gpu_uuid, from, to") from exc
    return inv
