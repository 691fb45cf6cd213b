"""The stream processor's logic, independent of the runtime that feeds it.

The runtime (streams/worker.py, faust) hands over records in batches; this module decodes
them, feeds the pure attribution core, keeps per-partition event-time watermarks, and
implements the delivery guarantee in ``flush``:

  1. write the batch's facts to the store (idempotent fact ids);
  2. when asked (every few seconds, and when caught up), write a checkpoint: attribution
     state + the next offset of every partition it reflects;
  3. return — only then does the runtime acknowledge the batch.

On start, state and offsets come from the last checkpoint, and the runtime moves the
group's committed offsets back to it if they ran ahead (batches acknowledged after the
last checkpoint are read again and rewrite the same facts). Records below a checkpoint
offset (re-delivered because a commit was lost) are skipped, so nothing counts twice.

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

from gpuledger.domain.attribution import NEG_INF, Attributor
from gpuledger.domain.bounds import check_event_time_ms
from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.facts import FactBatch, SourcePos
from gpuledger.domain.inventory import parse_inventory
from gpuledger.domain.pricing import parse_credits
from gpuledger.domain.quota import parse_quotas
from gpuledger.schemas import Codec
from gpuledger.sinks.base import Checkpoint, FactStore, PermanentStoreError
from gpuledger.sinks.isolate import write_isolating
from gpuledger.streams.topics import Topics

__all__ = ["FlushResult", "Processor"]

PROCESSOR_NAME = "attribution"
DeadLetter = Callable[[str, str, bytes], None]  # (source, reason, raw)
Flush = Callable[[], None]
REFERENCE_PARSERS = {"inventory": parse_inventory, "ratecards": parse_ratecards, "quotas": parse_quotas,
                     "credits": parse_credits}


class EventTimeError(ValueError):
    """A record's event time is outside the bounds the processor accepts."""


def check_event_time(observed_at_ms: int, ingested_at_ms: int, max_future_skew_ms: int) -> None:
    """Raise ``EventTimeError`` naming the bound broken (pure: both instants come from the record;
    the bounds are ingest's, ``domain/bounds.py``)."""
    reason = check_event_time_ms(observed_at_ms, ingested_at_ms, max_future_skew_ms)
    if reason:
        raise EventTimeError(f"{reason}; fix the source's clock or the capture line")


@dataclass(frozen=True)
class FlushResult:
    capacity_facts: int
    utilization_facts: int
    request_facts: int
    pending_samples: int
    demand_facts: int = 0


class Processor:
    def __init__(self, topics: Topics, store: FactStore, dead_letter: DeadLetter, dead_letter_flush: Flush,
                 stale_ceiling_ms: int, node_grace_ms: int, max_future_skew_ms: int = 86_400_000) -> None:
        self.topics, self.store = topics, store
        self.max_future_skew_ms = max_future_skew_ms
        self.dead_letter, self.dead_letter_flush = dead_letter, dead_letter_flush
        self.stale_ceiling_ms, self.node_grace_ms = stale_ceiling_ms, node_grace_ms
        self.codecs = {t.name: Codec(t.schema) for t in topics.processed()}
        self.attributors: dict[str, Attributor] = {}
        self.next_offsets: dict[str, int] = {}  # "topic:partition" -> next offset to read
        self.first_offsets: dict[str, int] = {}  # "topic:partition" -> first offset ever read (the ledger's sources)
        self.partition_wm: dict[str, int] = {}  # "topic:partition" -> max observed_at_ms
        self.extents: dict[str, tuple[int, int]] = {}  # "topic:partition" -> (low, high)
        self.seq = 0
        self.skipped_replayed = 0
        self.dead_lettered = 0
        self.series_skipped: dict[str, int] = {}  # DCGM series skipped since last taken, by reason (metrics)
        self._inventories: list[tuple[str, dict, int]] = []
        self._references: list[tuple[str, str, int, str]] = []
        self._unwritten = FactBatch()

    # -- start -------------------------------------------------------------------
    def restore(self) -> dict[str, int]:
        cp = self.store.load_checkpoint(PROCESSOR_NAME)
        if cp is None:
            return {}
        self.seq = cp.seq
        self.next_offsets = dict(cp.offsets)
        self.partition_wm = dict(cp.state.get("partition_wm", {}))
        self.first_offsets = dict(cp.state.get("first_offsets", {}))
        self.dead_lettered = cp.state.get("dead_lettered", 0)
        for cluster, st in cp.state.get("clusters", {}).items():
            self.attributors[cluster] = Attributor.from_state(st, self.stale_ceiling_ms, self.node_grace_ms)
        return dict(self.next_offsets)

    def set_extents(self, extents: dict[str, tuple[int, int]]) -> None:
        """The low/high offsets of every partition read, so empty ones do not hold watermarks."""
        self.extents = dict(extents)

    # -- records -----------------------------------------------------------------
    def handle(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        key = f"{topic}:{partition}"
        if offset < self.next_offsets.get(key, 0):
            self.skipped_replayed += 1
            return
        self.next_offsets[key] = offset + 1
        self.first_offsets.setdefault(key, offset)
        source = f"{topic}/{partition}@{offset}"
        try:
            record = self.codecs[topic].decode(value or b"")
            self._dispatch(topic, partition, offset, record)
        except Exception as exc:  # noqa: BLE001 — the record boundary: whatever a record raises dead-letters it
            self.dead_lettered += 1
            self.dead_letter(source, f"{type(exc).__name__}: {exc}", value or b"")

    def _attributor(self, cluster_id: str) -> Attributor:
        att = self.attributors.get(cluster_id)
        if att is None:
            att = self.attributors[cluster_id] = Attributor(cluster_id, self.stale_ceiling_ms, self.node_grace_ms)
        return att

    def _dispatch(self, topic: str, partition: int, offset: int, r: dict) -> None:
        t = self.topics
        pos = SourcePos(topic, partition, offset)
        if topic == t.reference.name:
            parse = REFERENCE_PARSERS.get(r["kind"])
            if parse is None:
                raise ValueError(f"unknown reference kind {r['kind']!r} (one of {', '.join(REFERENCE_PARSERS)})")
            doc = orjson.loads(r["document_json"])
            parse(doc)  # refused documents are not written: the previous valid one stays in force
            if r["kind"] == "inventory":
                self._attributor(r["cluster_id"]).apply_inventory(doc)
                self._inventories.append((r["cluster_id"], doc, r["observed_at_ms"]))
            else:
                self._references.append((r["cluster_id"], r["kind"], r["observed_at_ms"], r["document_json"]))
            return
        ts = r["observed_at_ms"]
        check_event_time(ts, r["ingested_at_ms"], self.max_future_skew_ms)
        if topic == t.k8s.name:
            self._attributor(r["cluster_id"]).apply_watch(r["event_type"], orjson.loads(r["object_json"]), ts)
        elif topic == t.podresources.name:
            self._attributor(r["cluster_id"]).apply_podresources(r["node"], orjson.loads(r["response_json"]), ts, pos)
        elif topic == t.dcgm.name:
            for reason, n in self._attributor(r["cluster_id"]).apply_dcgm(r["node"], r["exposition"], ts, pos).items():
                if not reason.startswith("not an attribution field"):  # blanks, implausible values, repeats
                    self.series_skipped[reason] = self.series_skipped.get(reason, 0) + n
        elif topic == t.vgpu.name:
            self._attributor(r["cluster_id"]).apply_vgpu(r["host"], r["vgpus"], ts, pos)
        elif topic == t.requests.name:
            self._attributor(r["cluster_id"]).apply_request(r, pos)
        key = f"{topic}:{partition}"
        if ts > self.partition_wm.get(key, NEG_INF):
            self.partition_wm[key] = ts

    # -- watermarks ----------------------------------------------------------------
    def watermark(self, topic: str) -> int:
        """Min over the topic's non-empty partitions of the latest event time read there."""
        marks = []
        for key, (low, high) in self.extents.items():
            if key.rsplit(":", 1)[0] == topic and high > low:
                marks.append(self.partition_wm.get(key, NEG_INF))
        return min(marks) if marks else NEG_INF

    # -- write, then commit ------------------------------------------------------------
    def flush(self, checkpoint: bool = True) -> FlushResult:
        k8s_wm, pr_wm = self.watermark(self.topics.k8s.name), self.watermark(self.topics.podresources.name)
        vgpu_wm, dcgm_wm = self.watermark(self.topics.vgpu.name), self.watermark(self.topics.dcgm.name)
        batch = self._unwritten  # facts a failed write left behind go first: the attributors drained them
        for cluster in sorted(self.attributors):
            att = self.attributors[cluster]
            att.advance(k8s_wm, pr_wm, vgpu_wm, dcgm_wm)
            batch.extend(att.drain())
        for cluster, doc, ts in self._inventories:
            self.store.write_inventory(cluster, parse_inventory(doc), ts)
        for ref in self._references:
            self.store.write_reference(*ref)
        self._inventories.clear()
        self._references.clear()
        write_isolating(self.store, batch, self._reject_fact)  # 1. facts; on a StoreError they stay for the retry
        self.dead_letter_flush()  # and dead letters, the rows the store refused among them
        self._unwritten = FactBatch()
        pending = sum(a.pending_samples() for a in self.attributors.values())
        result = FlushResult(len(batch.capacity), len(batch.utilization), len(batch.requests), pending,
                             len(batch.demand))
        if not checkpoint:
            return result
        self.seq += 1
        self.store.save_checkpoint(PROCESSOR_NAME, Checkpoint(self.seq, dict(self.next_offsets), {  # 2. checkpoint
            "partition_wm": self.partition_wm, "first_offsets": self.first_offsets, "dead_lettered": self.dead_lettered,
            "clusters": {c: a.to_state() for c, a in self.attributors.items()},
        }))
        return result

    def take_series_skipped(self) -> dict[str, int]:
        """DCGM series skipped since the last call, by reason."""
        out, self.series_skipped = self.series_skipped, {}
        return out

    def _reject_fact(self, table: str, fact: object, exc: PermanentStoreError) -> None:
        """A fact row the store refuses for good: dead-lettered under the record it came from."""
        source = f"{getattr(fact, 'src_topic', '')}/{getattr(fact, 'src_partition', '')}@{getattr(fact, 'src_offset', '')}"
        self.dead_lettered += 1
        self.dead_letter(source, f"StoreRejected: {table} row {getattr(fact, 'fact_id', '?')}: {exc}",
                         repr(fact).encode())

    def caught_up(self, highs: dict[str, int]) -> bool:
        """True once every partition has been read up to the given end offsets."""
        return all(self.next_offsets.get(key, self.extents.get(key, (0, 0))[0]) >= high for key, high in highs.items())
