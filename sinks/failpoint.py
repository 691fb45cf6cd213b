"""Fault injection at the store port, for the fault suite: an embedded engine cannot be
taken away from the process that owns it, so its outage is injected here. ``OutageStore``
wraps the real store and refuses every write (``TransientStoreError``, as a dropped connection to a
server would) for ``for_s`` seconds from the first write that comes both ``after_s`` after start and
after ``after_writes`` fact writes went through (a run that ends in seconds still meets its outage
mid-run); reads and everything else go to the real store. Enabled only by
``GPULEDGER_FAILPOINT_STORE_OUTAGE=[AFTER_S, FOR_S]`` or ``[AFTER_S, FOR_S, AFTER_WRITES]``."""

from __future__ import annotations

from collections.abc import Callable

from gpuledger.sinks.base import TransientStoreError

__all__ = ["OutageStore"]


class OutageStore:
    def __init__(self, store, after_s: float, for_s: float, monotonic: Callable[[], float],
                 after_writes: int = 0) -> None:
        self._store, self._monotonic = store, monotonic
        self._earliest, self._for_s = monotonic() + after_s, for_s
        self._writes_left = int(after_writes)
        self._from: float | None = None  # when the outage began; None until it does
        self.refused = 0

    def _gate(self, what: str) -> None:
        now = self._monotonic()
        if self._from is None and now >= self._earliest and self._writes_left <= 0:
            self._from = now
        if self._from is not None and now < self._from + self._for_s:
            self.refused += 1
            raise TransientStoreError(f"{what}: connection refused (injected outage of {self._for_s:.0f}s)")

    def _wrote(self) -> None:
        self._writes_left -= 1

    def write_facts(self, batch) -> None:
        self._gate("write facts")
        self._store.write_facts(batch)
        self._wrote()

    def write_encoded(self, kind: str, container: bytes) -> None:
        self._gate("write facts")
        self._store.write_encoded(kind, container)
        self._wrote()

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
