"""The engine (streams/engine.py) in one process with a fact store attached: every unit and
the broadcast held here, facts written straight to the store. The in-memory pipeline of the
tests runs on it; the Kafka runtime (streams/runtime.py) runs the same engine with facts going
through the fact topics instead. ``flush``:

  1. write the batch's facts to the store (idempotent fact ids);
  2. when asked, write a checkpoint: every unit's and the broadcast's state with the next
     offset of every partition it reflects;
  3. return. Records below a checkpoint offset are skipped, so nothing counts twice.

One bad record never halts attribution. Whatever a record makes the code raise (any
``Exception``) sends it to the dead-letter topic with its position (topic/partition@offset)
and ``<exception type>: <message>``, and the next record is read. The domain validates a
record before it changes any state (watch objects' shapes in domain/k8s.py, a scrape is
parsed, a snapshot's holders are built, a reference document is parsed, all before they are
applied), so a refused record leaves nothing half-applied (at most the count of watch events
seen, and an empty attributor for its cluster, which emits nothing), and a shape that passed
cannot fail later in ``flush``. Refused the same way:

- a source record whose event time is before 2000-01-01 or more than ``max_future_skew_ms``
  after its ``ingested_at_ms``. That field is the publisher's clock when it published the
  record (live producers correct it to the broker's clock, producers/clock.py), the only
  clock in the record that is not the event time itself: the Kafka timestamp is CreateTime
  = ``observed_at``, and bounding by event times already seen would be circular. It is read
  from the record, never from this process's clock, so a replay judges every record exactly
  as the first run did. (A scrape stamped 2100 would otherwise make every later scrape of
  its node a repeat, and a future bookmark would hold the watch watermark in the future.)
  Reference documents are exempt: their event time is their validity, which may lie ahead.
- a reference document (inventory, rate cards, quotas, credits) its parser refuses, or of an
  unknown kind: it is not written, so the previous valid one stays in force.
- a fact row the store refuses for good (a value that does not fit its column): the batch is
  bisected and only that row is dead-lettered (sinks/isolate.py), with the fact's source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from gpuledger.domain.attribution import Counters
from gpuledger.domain.facts import FactBatch
from gpuledger.domain.inventory import parse_inventory
from gpuledger.sinks.base import Checkpoint, FactStore, PermanentStoreError
from gpuledger.sinks.isolate import settle_batch, write_isolating
from gpuledger.streams.engine import Engine, EventTimeError, check_event_time, merge_progress
from gpuledger.bus.topics import Topics

__all__ = ["EventTimeError", "FlushResult", "Processor", "check_event_time"]

PROCESSOR_NAME = "attribution"
DeadLetter = Callable[[str, str, bytes], None]  # (source, reason, raw)
Flush = Callable[[], None]


@dataclass(frozen=True)
class FlushResult:
    capacity_facts: int
    utilization_facts: int
    request_facts: int
    pending_samples: int
    demand_facts: int = 0


class ClusterView:
    """One cluster across every unit: counters summed, pending samples counted."""

    def __init__(self, atts: list) -> None:
        self._atts = atts
        self.counters = Counters(**{k: sum(getattr(a.counters, k) for a in atts) for k in vars(Counters())})
        self.guest_pending = [g for a in atts for g in a.guest_pending]

    def pending_samples(self) -> int:
        return sum(a.pending_samples() for a in self._atts)


class Processor:
    def __init__(self, topics: Topics, store: FactStore, dead_letter: DeadLetter, dead_letter_flush: Flush,
                 stale_ceiling_ms: int, node_grace_ms: int, max_future_skew_ms: int = 86_400_000,
                 lateness_ms: int = 3_600_000) -> None:
        self.topics, self.store = topics, store
        self.dead_letter_flush = dead_letter_flush
        self.dead_lettered = 0

        def dead(source: str, reason: str, raw: bytes) -> None:
            self.dead_lettered += 1
            dead_letter(source, reason, raw)
        self.dead_letter = dead
        self.engine = Engine(topics, dead, stale_ceiling_ms, node_grace_ms, max_future_skew_ms, lateness_ms)
        self.seq = 0
        self._unwritten = FactBatch()

    @property
    def attributors(self) -> dict[str, ClusterView]:
        clusters: dict[str, list] = {}
        for unit in self.engine.units.values():
            for c, a in unit.attributors.items():
                clusters.setdefault(c, []).append(a)
        return {c: ClusterView(atts) for c, atts in clusters.items()}

    @property
    def series_skipped(self) -> dict[str, int]:
        return self.engine.series_skipped

    def restore(self) -> dict[str, int]:
        cp = self.store.load_checkpoint(PROCESSOR_NAME)
        if cp is None or "units" not in cp.state:
            return {}
        self.seq = cp.seq
        self.dead_lettered = cp.state.get("dead_lettered", 0)
        self.engine.reset_broadcast(cp.state["broadcast"])
        for number, st in cp.state["units"].items():
            self.engine.add_unit(int(number), st)
        return dict(cp.offsets)

    def set_extents(self, extents: dict[str, tuple[int, int]]) -> None:
        """The low/high offsets of every partition read, so empty ones do not hold watermarks."""
        self.engine.extents = dict(extents)

    def handle(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        e = self.engine
        if topic in e.unit_topics:
            e.handle_unit(topic, partition, offset, value)
        if topic in e.broadcast_topics:
            e.handle_broadcast(topic, partition, offset, value, dead_letter=topic not in e.unit_topics)

    def flush(self, checkpoint: bool = True, closing: bool = False) -> FlushResult:
        batch = self._unwritten  # facts a failed write left behind go first: the engine drained them
        batch.extend(self.engine.advance(closing))
        self._unwritten = batch
        for ref in self.engine.references:
            self.store.write_reference(ref.cluster_id, ref.kind, ref.observed_at_ms, ref.document_json,
                                       ref.published_at_ms)
            if ref.kind == "inventory":
                self.store.write_inventory(ref.cluster_id, parse_inventory(orjson.loads(ref.document_json)),
                                           ref.published_at_ms)
        self.engine.references.clear()
        batch = settle_batch(self.store, batch, self._conflict)
        self._unwritten = batch
        write_isolating(self.store, batch, self._reject_fact)  # 1. facts; on a StoreError they stay for the retry
        self.dead_letter_flush()
        self._unwritten = FactBatch()
        result = FlushResult(len(batch.capacity), len(batch.utilization), len(batch.requests),
                             self.engine.pending_samples(), len(batch.demand))
        if checkpoint:
            self.seq += 1
            self.store.save_checkpoint(PROCESSOR_NAME, self.checkpoint())  # 2. checkpoint
        return result

    def checkpoint(self) -> Checkpoint:
        e = self.engine
        nxt, first, dead = merge_progress(e.progress())
        return Checkpoint(self.seq, nxt, {"first_offsets": first, "dead_lettered": self.dead_lettered,
                                          "broadcast": e.broadcast_state(),
                                          "units": {str(n): e.unit_state(n) for n in sorted(e.units)}})

    @property
    def next_offsets(self) -> dict[str, int]:
        return merge_progress(self.engine.progress())[0]

    def take_series_skipped(self) -> dict[str, int]:
        return self.engine.take_series_skipped()

    def _conflict(self, fact: object, reason: str) -> None:
        source = f"{getattr(fact, 'src_topic', '')}/{getattr(fact, 'src_partition', '')}@{getattr(fact, 'src_offset', '')}"
        self.dead_letter(source, reason, repr(fact).encode())

    def _reject_fact(self, table: str, fact: object, exc: PermanentStoreError) -> None:
        """A fact row the store refuses for good: dead-lettered under the record it came from."""
        source = f"{getattr(fact, 'src_topic', '')}/{getattr(fact, 'src_partition', '')}@{getattr(fact, 'src_offset', '')}"
        self.dead_letter(source, f"StoreRejected: {table} row {getattr(fact, 'fact_id', '?')}: {exc}",
                         repr(fact).encode())

    def caught_up(self, highs: dict[str, int]) -> bool:
        nxt = self.next_offsets
        return all(nxt.get(key, self.engine.extents.get(key, (0, 0))[0]) >= high for key, high in highs.items())
