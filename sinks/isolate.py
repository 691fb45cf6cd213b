"""Writing a batch the store refuses for good: find the rows that cause it.

A ``PermanentStoreError`` on a batch of facts is either the rows' fault (a value that does not
fit its column) or the store's (a dropped table, missing grants). ``write_isolating`` tells
them apart: it checks the table can be used at all (``probe``), then bisects the batch —
writing halves, down to single rows — so every row the store takes is written and every row
it refuses on its own is handed to ``reject`` with the error. Writes are idempotent (fact ids),
so a half written twice changes nothing. When the table itself is unusable the error is
raised again, naming the table: no row is to blame and nothing is dropped.

A transient error on the way propagates as it is: the caller retries the whole batch (rows
rejected before it are then rejected again: a dead letter may repeat, a fact is never lost).
"""

from __future__ import annotations

from collections.abc import Callable

from dataclasses import replace

from gpuledger.domain.facts import FactBatch
from gpuledger.domain.requests import RequestFact, settle_requests
from gpuledger.sinks.base import FactStore, PermanentStoreError

__all__ = ["TABLES", "settle_batch", "write_isolating"]

TABLES = {"capacity": "capacity_facts", "utilization": "utilization_facts", "requests": "request_facts",
          "demand": "demand_facts", "models": "model_facts",
          "health": "gpu_health_facts", "health_incidents": "gpu_health_incidents"}
Reject = Callable[[str, object, PermanentStoreError], None]  # (table, fact, error)


def settle_batch(store: FactStore, batch: FactBatch, conflict: Callable[[RequestFact, str], None]) -> FactBatch:
    """``batch`` less the request events that repeat a request already recorded: one with other
    content is handed to ``conflict`` with the reason (the recorded one stands); one with the
    same content is left out (nothing to write)."""
    if not batch.requests:
        return batch
    write, conflicts = settle_requests(batch.requests, store.known_requests([f.fact_id for f in batch.requests]))
    for fact, reason in conflicts:
        conflict(fact, reason)
    return replace(batch, requests=write)


def write_isolating(store: FactStore, batch: FactBatch, reject: Reject) -> int:
    """Write ``batch``; returns how many rows were rejected (0 when the store took it whole)."""
    try:
        store.write_facts(batch)
        return 0
    except PermanentStoreError:
        pass
    return sum(_bisect(store, kind, table, getattr(batch, kind), reject, probed=False)
               for kind, table in TABLES.items())


def _bisect(store: FactStore, kind: str, table: str, facts: list, reject: Reject, probed: bool) -> int:
    if not facts:
        return 0
    try:
        store.write_facts(FactBatch(**{kind: facts}))
        return 0
    except PermanentStoreError as exc:
        if not probed or len(facts) == 1:
            store.probe(table)  # raises when the table itself cannot be used: not the rows' fault
            probed = True
        if len(facts) == 1:
            reject(table, facts[0], exc)
            return 1
    mid = len(facts) // 2
    return (_bisect(store, kind, table, facts[:mid], reject, probed)
            + _bisect(store, kind, table, facts[mid:], reject, probed))
