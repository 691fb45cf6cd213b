"""Fault injection at the store port, for the fault suite: an embedded engine cannot be
taken away from the process that owns it, so its outage is injected here. ``OutageStore``
wraps the real store and refuses every write (``TransientStoreError``, as a dropped connection to a
server would) from ``after_s`` after start for ``for_s`` seconds; reads and everything else
go to the real store. Enabled only by ``GPULEDGER_FAILPOINT_STORE_OUTAGE=[AFTER_S, FOR_S]``."""

from __future__ import annotations

from collections.abc import Callable

from gpuledger.sinks.base import TransientStoreError

__all__ = ["OutageStore"]


class OutageStore:
    def __init__(self, store, after_s: float, for_s: float, monotonic: Callable[[], float]) -> None:
        self._store, self._monotonic = store, monotonic
        self._from = monotonic() + after_s
        self._to = self._from + for_s
        self.refused = 0

    def _gate(self, what: str) -> None:
        if self._from <= self._monotonic() < self._to:
            self.refused += 1
            raise TransientStoreError(f"{what}: connection refused (injected outage until {self._to - self._from:.0f}s)")

    def write_facts(self, batch) -> None:
        self._gate("write facts")
        self._store.write_facts(batch)

    def write_encoded(self, kind: str, container: bytes) -> None:
        self._gate("write facts")
        self._store.write_encoded(kind, container)

    def write_reference(self, *args) -> None:
        self._gate("write reference")
        self._store.write_reference(*args)

    def write_inventory(self, *args) -> None:
        self._gate("write inventory")
        self._store.write_inventory(*args)

    def save_checkpoint(self, *args) -> None:
        self._gate("save checkpoint")
        self._store.save_checkpoint(*args)

    def __getattr__(self, name: str):
        return getattr(self._store, name)
