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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from gpuledger.domain.attribution import NEG_INF, Attributor
from gpuledger.domain.facts import FactBatch, SourcePos
from gpuledger.domain.inventory import InventoryError, parse_inventory
from gpuledger.domain.k8s import WatchError
from gpuledger.domain.podresources import PodResourcesError
from gpuledger.schemas import Codec, CodecError
from gpuledger.sinks.base import Checkpoint, FactStore
from gpuledger.streams.topics import Topics

__all__ = ["FlushResult", "Processor"]

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


class Processor:
    def __init__(self, topics: Topics, store: FactStore, dead_letter: DeadLetter, dead_letter_flush: Flush,
                 stale_ceiling_ms: int, node_grace_ms: int) -> None:
        self.topics, self.store = topics, store
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
        except (CodecError, WatchError, PodResourcesError, InventoryError, ValueError, KeyError, TypeError) as exc:
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
            if r["kind"] == "inventory":
                doc = orjson.loads(r["document_json"])
                parse_inventory(doc)
                self._attributor(r["cluster_id"]).apply_inventory(doc)
                self._inventories.append((r["cluster_id"], doc, r["observed_at_ms"]))
            else:
                self._references.append((r["cluster_id"], r["kind"], r["observed_at_ms"], r["document_json"]))
            return
        ts = r["observed_at_ms"]
        if topic == t.k8s.name:
            self._attributor(r["cluster_id"]).apply_watch(r["event_type"], orjson.loads(r["object_json"]), ts)
        elif topic == t.podresources.name:
            self._attributor(r["cluster_id"]).apply_podresources(r["node"], orjson.loads(r["response_json"]), ts, pos)
        elif topic == t.dcgm.name:
            self._attributor(r["cluster_id"]).apply_dcgm(r["node"], r["exposition"], ts, pos)
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
        self.dead_letter_flush()
        self.store.write_facts(batch)  # 1. facts (and dead letters, above); on a StoreError they stay for the retry
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

    def caught_up(self, highs: dict[str, int]) -> bool:
        """True once every partition has been read up to the given end offsets."""
        return all(self.next_offsets.get(key, self.extents.get(key, (0, 0))[0]) >= high for key, high in highs.items())
