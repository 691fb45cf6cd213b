"""The partitioned attribution engine: records in, facts out, state per partition. No Kafka,
no ClickHouse, no clock: the runtime (streams/runtime.py) feeds it, the in-memory pipeline of
the tests too (streams/processor.py).

The node-keyed source topics (PodResources, DCGM), the host-keyed vGPU snapshots and the
requests share one partition count and Kafka's key partitioning, so partition ``n`` of each
holds the same nodes and hosts. A **unit** is partition ``n`` of all of them together: it
owns those nodes' and hosts' state and emits their facts. A worker owns the units Kafka's
consumer group gives it (range assignment keeps partition ``n`` of every topic together).

What every unit needs is the **broadcast** state, read in full by every worker: the watch
stream's ownership book, the reference documents (inventory) and a directory of every vGPU
host's segments (guest samples live on the guest VM's partition, not on their host's). The
broadcast emits no facts; the units do. It keeps history only back to the late-data horizon
of the units this worker holds (``prune``): the facts about older time are written.

Watermarks are per unit (the latest event time read on its partition of each topic) plus the
broadcast's (the minimum over the watch and vGPU partitions), never over partitions another
worker owns. A unit restored from a snapshot ahead of this worker's broadcast waits until the
broadcast has read that far.

Record boundary: whatever a record makes the code raise sends it to the dead-letter callback
with its position and reason, before it changes any state (see streams/processor.py for the
refusal rules); the next record is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from gpuledger.domain.attribution import NEG_INF, Attributor
from gpuledger.domain.capacity_plan import parse_throughput
from gpuledger.domain.bounds import check_event_time_ms
from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.endpoints import parse_endpoints
from gpuledger.domain.facts import FactBatch, SourcePos, source_pos
from gpuledger.domain.inventory import parse_inventory
from gpuledger.domain.pricing import parse_credits
from gpuledger.domain.podresources import snapshot_holders
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.suspense import parse_assignments
from gpuledger.streams.record_reader import RecordReader
from gpuledger.bus.topics import Topics

__all__ = ["BROADCAST", "Engine", "EventTimeError", "REFERENCE_PARSERS", "Reference", "Unit"]

DeadLetter = Callable[[str, str, bytes], None]  # (source, reason, raw)
REFERENCE_PARSERS = {"inventory": parse_inventory, "ratecards": parse_ratecards, "quotas": parse_quotas,
                     "credits": parse_credits, "endpoints": parse_endpoints, "suspense": parse_assignments,
                     "throughput": parse_throughput}
BROADCAST = "broadcast"
PRUNE_EVERY_MS = 60_000  # event time between two prunes of the broadcast history


class EventTimeError(ValueError):
    """A record's event time is outside the bounds the processor accepts."""


def check_event_time(observed_at_ms: int, ingested_at_ms: int, max_future_skew_ms: int) -> None:
    reason = check_event_time_ms(observed_at_ms, ingested_at_ms, max_future_skew_ms)
    if reason:
        raise EventTimeError(f"{reason}; fix the source's clock or the capture line")


@dataclass(frozen=True)
class Reference:
    """A reference document that passed its parser (written to the store by the sink)."""

    cluster_id: str
    kind: str
    observed_at_ms: int
    document_json: str
    published_at_ms: int  # when it was published (the record's ingested_at_ms)


@dataclass
class Unit:
    """Partition ``number`` of every partitioned source topic, and what it owns."""

    number: int
    attributors: dict[str, Attributor] = field(default_factory=dict)
    next_offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset to read
    first_offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> first offset read
    wm: dict[str, int] = field(default_factory=dict)  # topic -> latest event time read on this partition
    dead_lettered: int = 0
    # (cluster, node) -> its latest PodResources response text and what it reads as: a node's
    # snapshot seldom changes, so the same text is read once (a cache, not state)
    holders_seen: dict[tuple[str, str], tuple[str, dict]] = field(default_factory=dict)


@dataclass
class Broadcast:
    attributors: dict[str, Attributor] = field(default_factory=dict)
    next_offsets: dict[str, int] = field(default_factory=dict)
    first_offsets: dict[str, int] = field(default_factory=dict)
    partition_wm: dict[str, int] = field(default_factory=dict)
    dead_lettered: int = 0
    pruned_before_ms: int = NEG_INF  # history before this is gone from the book
    pruned_at_ms: int = NEG_INF


class Engine:
    def __init__(self, topics: Topics, dead_letter: DeadLetter, stale_ceiling_ms: int, node_grace_ms: int,
                 max_future_skew_ms: int = 86_400_000, lateness_ms: int = 3_600_000, encoded: bool = False) -> None:
        """``encoded``: the units' utilization facts of exclusive GPUs come out as their Avro
        bodies (domain/samples.py ``SampleAttribution``), for a worker that only writes them."""
        self.topics = topics
        self.encoded = encoded
        self.dead_letter = dead_letter
        self.stale_ceiling_ms, self.node_grace_ms = stale_ceiling_ms, node_grace_ms
        self.max_future_skew_ms, self.lateness_ms = max_future_skew_ms, lateness_ms
        self.codecs = {t.name: RecordReader(t.schema) for t in topics.processed()}
        self.unit_topics = (topics.podresources.name, topics.dcgm.name, topics.vgpu.name, topics.requests.name,
                            topics.model_metrics.name)
        self.broadcast_topics = (topics.k8s.name, topics.reference.name, topics.vgpu.name)
        self.units: dict[int, Unit] = {}
        self.bcast = Broadcast()
        self.extents: dict[str, tuple[int, int]] = {}  # "topic:partition" -> (low, high)
        self.references: list[Reference] = []  # accepted since last taken (the in-memory sink writes them)
        self.series_skipped: dict[str, int] = {}
        self.held: set[int] | None = None  # the units this worker holds; None = every partition (one process)

    # -- units -----------------------------------------------------------------------
    def margin_ms(self) -> int:
        """How far before a unit's watermarks a record may still need the book."""
        return self.node_grace_ms + self.stale_ceiling_ms + self.lateness_ms

    def add_unit(self, number: int, state: dict | None = None) -> bool:
        """Hold unit ``number`` (from its snapshot, or empty). False when the broadcast has
        already forgotten history the unit may need: rebuild the broadcast (``reset_broadcast``)."""
        unit = Unit(number)
        if state is not None:
            unit.next_offsets, unit.first_offsets = dict(state["next_offsets"]), dict(state["first_offsets"])
            unit.wm, unit.dead_lettered = dict(state["wm"]), state["dead_lettered"]
            for cluster, st in state["attributors"].items():
                att = unit.attributors[cluster] = Attributor.from_state(
                    st, self.stale_ceiling_ms, self.node_grace_ms, self._shared(cluster), number == 0, self.lateness_ms)
                att.encoded = self.encoded
        self.units[number] = unit
        self._behind_broadcast(unit)
        return self._fits(unit, self.bcast.pruned_before_ms)

    def _fits(self, unit: Unit, pruned_before_ms: int) -> bool:
        """The broadcast still holds the watch history this unit's records to come may need
        (a unit that has read nothing reads from the start: it needs all of it)."""
        return pruned_before_ms <= NEG_INF or self.unit_low_ms(unit) - self.margin_ms() >= pruned_before_ms

    def _behind_broadcast(self, unit: Unit) -> None:
        """A unit's attributors never take the watch as known beyond what this worker's book
        has read: a segment is resolved only against a book that has reached its end (a unit
        restored ahead of the broadcast, or a broadcast read again from the start, waits)."""
        k8s_wm = self.broadcast_watermark(self.topics.k8s.name)
        for att in unit.attributors.values():
            att.k8s_watermark_ms = min(att.k8s_watermark_ms, k8s_wm)

    def drop_unit(self, number: int) -> None:
        self.units.pop(number, None)

    def unit_state(self, number: int) -> dict:
        u = self.units[number]
        return {"number": u.number, "next_offsets": u.next_offsets, "first_offsets": u.first_offsets, "wm": u.wm,
                "dead_lettered": u.dead_lettered,
                "attributors": {c: a.to_state() for c, a in sorted(u.attributors.items())}}

    def unit_low_ms(self, unit: Unit) -> int:
        """The earliest time this unit's records still to come may concern (its slowest source;
        the beginning when it has read nothing)."""
        marks = [unit.wm[t] for t in (self.topics.podresources.name, self.topics.dcgm.name) if t in unit.wm]
        return min(marks) if marks else NEG_INF

    # -- broadcast -------------------------------------------------------------------
    def _shared(self, cluster: str) -> Attributor:
        att = self.bcast.attributors.get(cluster)
        if att is None:
            att = self.bcast.attributors[cluster] = Attributor(cluster, self.stale_ceiling_ms, self.node_grace_ms,
                                                               emit_demand=False, lateness_ms=self.lateness_ms)
        return att

    def broadcast_state(self) -> dict:
        b = self.bcast
        return {"next_offsets": b.next_offsets, "first_offsets": b.first_offsets, "partition_wm": b.partition_wm,
                "dead_lettered": b.dead_lettered, "pruned_before_ms": b.pruned_before_ms,
                "pruned_at_ms": b.pruned_at_ms,
                "attributors": {c: a.to_state() for c, a in sorted(b.attributors.items())}}

    def reset_broadcast(self, state: dict | None = None) -> None:
        """Start the broadcast over: from a snapshot, or empty (read from the beginning)."""
        b = self.bcast = Broadcast()
        if state is not None:
            b.next_offsets, b.first_offsets = dict(state["next_offsets"]), dict(state["first_offsets"])
            b.partition_wm, b.dead_lettered = dict(state["partition_wm"]), state["dead_lettered"]
            b.pruned_before_ms, b.pruned_at_ms = state["pruned_before_ms"], state["pruned_at_ms"]
            for cluster, st in state["attributors"].items():
                b.attributors[cluster] = Attributor.from_state(st, self.stale_ceiling_ms, self.node_grace_ms,
                                                               emit_demand=False, lateness_ms=self.lateness_ms)
        for unit in self.units.values():
            for cluster, att in unit.attributors.items():
                att.shared = self._shared(cluster)
            self._behind_broadcast(unit)

    def broadcast_fits(self, state: dict) -> bool:
        """Can this broadcast snapshot serve every unit held (it forgot nothing they need)?"""
        return all(self._fits(u, state["pruned_before_ms"]) for u in self.units.values())

    # -- records -----------------------------------------------------------------------
    def handle_unit(self, topic: str, partition: int, offset: int, value: bytes | None) -> bool:
        """A record of a unit's partition; False when it was below the unit's offset (taken before)."""
        unit = self.units.get(partition)
        if unit is None:
            unit = self.units[partition] = Unit(partition)
        key = f"{topic}:{partition}"
        if offset < unit.next_offsets.get(key, 0):
            return False
        unit.next_offsets[key] = offset + 1
        unit.first_offsets.setdefault(key, offset)
        try:
            r = self.codecs[topic].decode(value or b"")
            ts = r["observed_at_ms"]
            check_event_time(ts, r["ingested_at_ms"], self.max_future_skew_ms)
            att = self._unit_att(unit, r["cluster_id"])
            pos = source_pos(topic, partition, offset)
            t = self.topics
            if topic == t.podresources.name:
                att.apply_holders(r["node"], self._holders(unit, r), ts, pos)
            elif topic == t.dcgm.name:
                for reason, n in att.apply_dcgm(r["node"], r["exposition"], ts, pos).items():
                    if not reason.startswith("not an attribution field"):  # blanks, implausible values, repeats
                        self.series_skipped[reason] = self.series_skipped.get(reason, 0) + n
            elif topic == t.vgpu.name:
                att.apply_vgpu(r["host"], r["vgpus"], ts, pos)
            elif topic == t.requests.name:
                att.apply_request(r, pos)
            elif topic == t.model_metrics.name:
                for reason, n in att.apply_model_scrape(r, pos).items():
                    if not reason.startswith(("not a model efficiency metric", "no model label")):
                        self.series_skipped[reason] = self.series_skipped.get(reason, 0) + n
            if ts > unit.wm.get(topic, NEG_INF):
                unit.wm[topic] = ts
        except Exception as exc:  # noqa: BLE001 — the record boundary: whatever a record raises dead-letters it
            unit.dead_lettered += 1
            self.dead_letter(f"{topic}/{partition}@{offset}", f"{type(exc).__name__}: {exc}", value or b"")
        return True

    @staticmethod
    def _holders(unit: Unit, r: dict) -> dict:
        text, seen_key = r["response_json"], (r["cluster_id"], r["node"])
        seen = unit.holders_seen.get(seen_key)
        if seen is not None and seen[0] == text:
            return seen[1]
        holders = snapshot_holders(orjson.loads(text))
        unit.holders_seen[seen_key] = (text, holders)
        return holders

    def _unit_att(self, unit: Unit, cluster: str) -> Attributor:
        att = unit.attributors.get(cluster)
        if att is None:
            att = unit.attributors[cluster] = Attributor(cluster, self.stale_ceiling_ms, self.node_grace_ms,
                                                         self._shared(cluster), unit.number == 0, self.lateness_ms)
            att.encoded = self.encoded
        return att

    def handle_broadcast(self, topic: str, partition: int, offset: int, value: bytes | None,
                         dead_letter: bool = True) -> bool:
        """A record every worker reads. ``dead_letter``: send a refused one on (False where the
        unit path of the same record does: vGPU snapshots)."""
        b = self.bcast
        key = f"{topic}:{partition}"
        if offset < b.next_offsets.get(key, 0):
            return False
        b.next_offsets[key] = offset + 1
        b.first_offsets.setdefault(key, offset)
        try:
            r = self.codecs[topic].decode(value or b"")
            t = self.topics
            if topic == t.reference.name:
                self._reference(r)
                return True
            ts = r["observed_at_ms"]
            check_event_time(ts, r["ingested_at_ms"], self.max_future_skew_ms)
            if topic == t.k8s.name:
                self._shared(r["cluster_id"]).apply_watch(r["event_type"], orjson.loads(r["object_json"]), ts)
            elif topic == t.vgpu.name:
                self._shared(r["cluster_id"]).apply_vgpu(r["host"], r["vgpus"], ts, SourcePos(topic, partition, offset))
            if ts > b.partition_wm.get(key, NEG_INF):
                b.partition_wm[key] = ts
        except Exception as exc:  # noqa: BLE001 — the record boundary
            if dead_letter:
                b.dead_lettered += 1
                self.dead_letter(f"{topic}/{partition}@{offset}", f"{type(exc).__name__}: {exc}", value or b"")
        return True

    def _reference(self, r: dict) -> None:
        parse = REFERENCE_PARSERS.get(r["kind"])
        if parse is None:
            raise ValueError(f"unknown reference kind {r['kind']!r} (one of {', '.join(REFERENCE_PARSERS)})")
        doc = orjson.loads(r["document_json"])
        parse(doc)  # refused documents are not written: the previous valid one stays in force
        if r["kind"] == "inventory":
            self._shared(r["cluster_id"]).apply_inventory(doc)
        self.references.append(Reference(r["cluster_id"], r["kind"], r["observed_at_ms"], r["document_json"],
                                         r["ingested_at_ms"]))

    def take_references(self) -> list[Reference]:
        out, self.references = self.references, []
        return out

    def take_series_skipped(self) -> dict[str, int]:
        out, self.series_skipped = self.series_skipped, {}
        return out

    # -- watermarks ----------------------------------------------------------------------
    def broadcast_watermark(self, topic: str) -> int:
        """Min over the topic's non-empty partitions of the latest event time read there."""
        marks = [self.bcast.partition_wm.get(key, NEG_INF) for key, (low, high) in self.extents.items()
                 if high > low and key.rsplit(":", 1)[0] == topic]
        return min(marks) if marks else NEG_INF

    def _unit_marks(self, unit: Unit) -> tuple[int, int, int]:
        t = self.topics
        dcgm = unit.wm.get(t.dcgm.name, NEG_INF)
        low, high = self.extents.get(f"{t.podresources.name}:{unit.number}", (0, 1))
        pr = unit.wm.get(t.podresources.name, NEG_INF) if high > low else dcgm  # no PodResources on it at all
        return pr, unit.wm.get(t.vgpu.name, NEG_INF), dcgm

    # -- output ------------------------------------------------------------------------
    def advance(self, closing: bool = False) -> FactBatch:
        """Emit what became final in every unit held, and whatever facts records made at once
        (requests), also of a unit waiting for this worker's broadcast: afterwards no fact is
        held outside the units' state, so a snapshot taken next counts no record whose facts
        are not out (the runtime's commit advances first). ``closing``: a bounded run read all
        its input, so capacity windows still open are emitted as they stand."""
        k8s_wm = self.broadcast_watermark(self.topics.k8s.name)
        vgpu_wm = self.broadcast_watermark(self.topics.vgpu.name)
        for att in self.bcast.attributors.values():
            att.advance_vgpu(vgpu_wm, closing)
            att.drain()  # the directory's own facts: the units emit them
        if self.held is None or 0 in self.held:  # unit 0 turns the book's waiting MIG pods into demand facts
            demand = self.units.setdefault(0, Unit(0))
            for cluster in self.bcast.attributors:
                self._unit_att(demand, cluster)
        batch = FactBatch()
        for number in sorted(self.units):
            unit = self.units[number]
            pr, vgpu, dcgm = self._unit_marks(unit)
            for cluster in sorted(unit.attributors):
                att = unit.attributors[cluster]
                if att.k8s_watermark_ms <= k8s_wm:  # one restored ahead of this worker's broadcast waits for it
                    att.advance(k8s_wm, pr, vgpu, dcgm, closing)
                batch.extend(att.drain())
        self._prune(k8s_wm)
        return batch

    def _prune(self, k8s_wm: int) -> None:
        b = self.bcast
        if k8s_wm == NEG_INF or k8s_wm - b.pruned_at_ms < PRUNE_EVERY_MS:
            return
        before = min(k8s_wm, self._held_low_ms()) - self.margin_ms()
        if before <= b.pruned_before_ms:
            return
        b.pruned_at_ms, b.pruned_before_ms = k8s_wm, before
        for att in b.attributors.values():
            att.prune_history(before)
        for unit in self.units.values():
            for att in unit.attributors.values():
                if att.emit_demand:
                    att.forget_demand_done()

    def _held_low_ms(self) -> int:
        """The slowest partition with data of the units held: one not read yet holds pruning back."""
        low = 2**62
        t = self.topics
        for key, (first, high) in self.extents.items():
            topic, p = key.rsplit(":", 1)
            if topic not in (t.podresources.name, t.dcgm.name) or high <= first:
                continue
            n = int(p)
            if self.held is not None and n not in self.held:
                continue
            unit = self.units.get(n)
            low = min(low, unit.wm.get(topic, NEG_INF) if unit is not None else NEG_INF)
        return low

    def pending_samples(self) -> int:
        return sum(a.pending_samples() for u in self.units.values() for a in u.attributors.values())

    def progress(self) -> list[dict]:
        """Where each unit and the broadcast stand: the ledger's sources."""
        out = [{"part": f"unit-{u.number}", "next_offsets": u.next_offsets, "first_offsets": u.first_offsets,
                "dead_lettered": u.dead_lettered} for u in sorted(self.units.values(), key=lambda u: u.number)]
        b = self.bcast
        vgpu = self.topics.vgpu.name
        out.append({"part": BROADCAST, "dead_lettered": b.dead_lettered,
                    "next_offsets": {k: v for k, v in b.next_offsets.items() if not k.startswith(vgpu + ":")},
                    "first_offsets": {k: v for k, v in b.first_offsets.items() if not k.startswith(vgpu + ":")}})
        return out


def merge_progress(parts: list[dict]) -> tuple[dict[str, int], dict[str, int], int]:
    """(next offsets, first offsets, dead letters) of the whole job, from its parts' progress;
    every worker reads the broadcast, so its parts agree and the furthest counts."""
    nxt: dict[str, int] = {}
    first: dict[str, int] = {}
    dead, bcast_dead = 0, 0
    for p in parts:
        for k, v in p["next_offsets"].items():
            nxt[k] = max(nxt.get(k, v), v)
        for k, v in p["first_offsets"].items():
            first[k] = min(first.get(k, v), v)
        if p["part"] == BROADCAST:
            bcast_dead = max(bcast_dead, p["dead_lettered"])
        else:
            dead += p["dead_lettered"]
    return nxt, first, dead + bcast_dead
