"""The fact-store port: where the processor writes facts and its checkpoints, and where
reports read them.

Delivery guarantee, as implemented by the processor (streams/processor.py):
  1. write the batch's facts (idempotent: deterministic fact ids, deduplicating store);
  2. write the checkpoint (state + the source offsets it reflects);
  3. only then may Kafka offsets be committed.
A crash between any two steps replays from the last checkpoint and rewrites the same facts.
``ClickHouseStore`` is the real adapter; ``MemoryStore`` its in-memory twin.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import fastavro
import orjson
from typing import Protocol

from gpuledger.domain.demand import DemandFact
from gpuledger.domain.facts import CapacityFact, FactBatch, UtilizationFact
from gpuledger.domain.gpu_health import GpuHealthFact
from gpuledger.domain.gpu_incidents import GpuHealthIncident
from gpuledger.domain.inventory import GpuEntry, Inventory, Unavailability
from gpuledger.domain.model_metrics import ModelFact
from gpuledger.domain.requests import RequestFact
from gpuledger.streams.fact_codec import FACT_CLASSES

__all__ = ["Checkpoint", "FactStore", "MemoryStore", "PermanentStoreError", "StoreError", "TransientStoreError"]


class StoreError(RuntimeError):
    """The store could not be reached or refused a write. ``transient``: the same write may
    succeed later (retry it); otherwise it never will (``PermanentStoreError``). ``table`` names
    the table written, when known. A plain ``StoreError`` is transient."""

    transient = True

    def __init__(self, message: str, table: str = "") -> None:
        super().__init__(message)
        self.table = table


class TransientStoreError(StoreError):
    """Connection refused or lost, timeout, server overloaded: retry with backoff."""


class PermanentStoreError(StoreError):
    """The write can never succeed as it is: a value that does not fit its column, a missing
    table, a malformed statement. Either rows cause it (isolate and dead-letter them) or the
    store itself is wrong (stop and say what to fix)."""

    transient = False


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    offsets: dict[str, int]  # "topic:partition" -> next offset to read
    state: dict


class FactStore(Protocol):
    def write_facts(self, batch: FactBatch) -> None: ...
    def write_encoded(self, kind: str, container: bytes) -> None: ...
    def known_requests(self, fact_ids: list[str]) -> dict[str, RequestFact]: ...
    def write_reference(self, cluster_id: str, kind: str, observed_at_ms: int, document: str,
                        published_at_ms: int) -> None: ...
    def reference_history(self, cluster_id: str, kind: str) -> list[tuple[int, int, str]]: ...
    def write_inventory(self, cluster_id: str, inventory: Inventory, document_ms: int) -> None: ...
    def save_checkpoint(self, processor: str, checkpoint: Checkpoint) -> None: ...
    def load_checkpoint(self, processor: str) -> Checkpoint | None: ...
    def probe(self, table: str) -> None: ...


@dataclass
class MemoryStore:
    """Facts in dicts keyed by fact id (so a rewrite is a no-op, as in the real store)."""

    capacity: dict[str, CapacityFact] = field(default_factory=dict)
    utilization: dict[str, UtilizationFact] = field(default_factory=dict)
    requests: dict[str, RequestFact] = field(default_factory=dict)
    demand: dict[str, DemandFact] = field(default_factory=dict)
    health: dict[str, GpuHealthFact] = field(default_factory=dict)
    health_incidents: dict[str, GpuHealthIncident] = field(default_factory=dict)
    models: dict[str, ModelFact] = field(default_factory=dict)
    # (cluster, kind) -> {(observed_at_ms, document): latest published_at_ms}: every document
    references: dict[tuple[str, str], dict[tuple[int, str], int]] = field(default_factory=dict)
    # cluster -> {entry key: (document_ms, entry)}, as the store's inventory tables keep them
    inventory_entries: dict[str, dict[tuple, tuple[int, object]]] = field(default_factory=dict)
    inventory: dict[str, Inventory] = field(default_factory=dict)
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)

    def write_facts(self, batch: FactBatch) -> None:
        self.capacity.update((f.fact_id, f) for f in batch.capacity)
        self.utilization.update((f.fact_id, f) for f in batch.utilization)
        self.requests.update((f.fact_id, f) for f in batch.requests)
        self.demand.update((f.fact_id, f) for f in batch.demand)
        self.health.update((f.fact_id, f) for f in batch.health)
        self.health_incidents.update((f.fact_id, f) for f in batch.health_incidents)
        self.models.update((f.fact_id, f) for f in batch.models)

    def write_encoded(self, kind: str, container: bytes) -> None:
        """Facts of ``kind`` (capacity, utilization, health) as an Avro object container file:
        read back into facts and written as ``write_facts`` writes them."""
        cls = FACT_CLASSES[kind]
        facts = [cls(**r) for r in fastavro.reader(io.BytesIO(container))]
        self.write_facts(FactBatch(**{kind: facts}))

    def known_requests(self, fact_ids: list[str]) -> dict[str, RequestFact]:
        return {i: self.requests[i] for i in fact_ids if i in self.requests}

    def write_reference(self, cluster_id: str, kind: str, observed_at_ms: int, document: str,
                        published_at_ms: int) -> None:
        """Kept with every document written before (append-only); the same document written
        again is kept once, at its latest publication."""
        docs = self.references.setdefault((cluster_id, kind), {})
        key = (observed_at_ms, document)
        docs[key] = max(published_at_ms, docs.get(key, published_at_ms))

    def reference_history(self, cluster_id: str, kind: str) -> list[tuple[int, int, str]]:
        """Every document of ``kind`` written for the cluster: (published_at_ms, observed_at_ms,
        document), the latest publication first (ties: observed_at_ms, then document, descending)."""
        docs = self.references.get((cluster_id, kind), {})
        return sorted(((p, o, d) for (o, d), p in docs.items()), reverse=True)

    def write_inventory(self, cluster_id: str, inventory: Inventory, document_ms: int) -> None:
        """Every document's GPU entries (by GPU and valid_from) and unavailability windows (by
        GPU and start), the latest ``document_ms`` winning for the same key (ties: the last
        written), as the store's inventory tables keep them; the profile weights of the last."""
        entries = self.inventory_entries.setdefault(cluster_id, {})
        for key, entry in [(("gpu", g.gpu_uuid, g.valid_from_ms), g) for g in inventory.gpus] + \
                          [(("unavailable", u.gpu_uuid, u.from_ms), u) for u in inventory.unavailable]:
            if key not in entries or document_ms >= entries[key][0]:
                entries[key] = (document_ms, entry)
        kept = [entry for _, entry in entries.values()]
        self.inventory[cluster_id] = Inventory([e for e in kept if isinstance(e, GpuEntry)],
                                               [e for e in kept if isinstance(e, Unavailability)],
                                               inventory.mig_profile_weights, inventory.vgpu_profile_weights)

    def save_checkpoint(self, processor: str, checkpoint: Checkpoint) -> None:
        current = self.checkpoints.get(processor)
        if current is None or checkpoint.seq > current.seq:  # stored as JSON, like the real store: a snapshot
            self.checkpoints[processor] = Checkpoint(checkpoint.seq, dict(checkpoint.offsets),
                                                     orjson.loads(orjson.dumps(checkpoint.state)))

    def load_checkpoint(self, processor: str) -> Checkpoint | None:
        return self.checkpoints.get(processor)

    def probe(self, table: str) -> None:
        """Raise a ``StoreError`` unless ``table`` can be written at all (always can, here)."""
