"""``gpuledger worker``: one attribution worker of a consumer group; run as many as there are
source partitions to spread (``gpuledger process --workers N``, or N pods of a Deployment).

One consume loop serves live processing, replay and the tests. The group consumer reads the
partitioned source topics (PodResources, DCGM, vGPU, requests); Kafka's range assignment
gives a worker partition ``n`` of every one of them together: unit ``n``
(streams/engine.py). A second consumer, outside the group, reads the broadcast topics (watch,
reference documents, vGPU) in full.

Offsets follow durability. Every ``checkpoint_interval_s``, when a rebalance takes units away,
when caught up and when stopped:

  1. the engine is advanced and drained, so every fact of every record taken so far is
     produced (a request is a fact as soon as it is read, and records parked ahead of the
     read-ahead are taken at the end of a pass, after that pass's facts were produced: a
     commit served before the next pass, by the next poll's rebalance or a stop, would
     otherwise count them in the snapshot and the offsets while their facts were only in
     memory, and lose them with the unit); then the facts are flushed to the fact topics and
     acknowledged by every in-sync replica (acks=all), with the dead letters;
  2. each unit's state, with the next offset of every partition it reflects, is written to
     its partition of the unit changelog, the broadcast's state to its changelog, and each
     unit's progress to ``facts.progress``; flushed and acknowledged;
  3. only then are the units' source offsets committed to the group.

A unit that is assigned (at start, or moved here by a rebalance) is read from its changelog
and its partitions are read from the offsets in it: the committed offsets are never ahead of
it (3 follows 2), so nothing is skipped; facts produced after the snapshot are produced again
with the same fact ids, and the sink writes them idempotently. Units that stay are kept in
memory; only moved units are loaded.

Reading is paced by event time (streams/pacing.py): a record more than ``read_ahead_s``
ahead of the slowest partition not yet at its end is parked, unprocessed, and its partition
paused until the others catch up, so state does not depend on how the broker hands out
fetches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from gpuledger.config import Settings
from gpuledger.domain.attribution import NEG_INF
from gpuledger.bus.acked import AckedProducer
from gpuledger.bus.dead_letter import DeadLetters
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.bus.security import client_config
from gpuledger.bus.changelog import Changelog
from gpuledger.bus.fetch import SOURCE_FETCH
from gpuledger.streams.collector import collect_for_the_data_path
from gpuledger.streams.pacing import Pacer
from gpuledger.streams.engine import Engine
from gpuledger.streams.fact_batches import emit_batched, encode_fact_bodies
from gpuledger.streams.fact_codec import FACT_KINDS
from gpuledger.streams.heap import resident_mib, trim_heap
from gpuledger.streams.metrics import WorkerMetrics
from gpuledger.bus.offsets import commit_offsets, committed_offsets, read_extents
from gpuledger.bus.topics import Topics

__all__ = ["WorkerJob", "run_worker"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class WorkerJob:
    """What a worker reads and where it writes: live processing, or a replay's job."""

    topics: Topics
    group: str
    until_caught_up: bool
    stop_offsets: dict[str, int] | None = None  # "topic:partition" -> stop before; None = live (or highs at start)


class _Stop(Exception):
    pass


class Worker:
    def __init__(self, settings: Settings, job: WorkerJob, progress: Callable[[str], None],
                 wall_ms: Callable[[], int], should_stop: Callable[[], bool]) -> None:
        self.s, self.job, self.progress, self.should_stop = settings, job, progress, should_stop
        t = self.topics = job.topics
        self.metrics = WorkerMetrics()
        self.client = client = client_config(settings)
        self.publisher = KafkaPublisher(settings.kafka_bootstrap, client=client)
        self.dead = DeadLetters(self.publisher, t.dead_letter.name, wall_ms)
        self.engine = Engine(t, self.metrics.counting_dead_letters(self.dead.send), int(settings.stale_ceiling_s * 1000),
                             int(settings.podresources_grace_s * 1000), int(settings.max_future_skew_s * 1000),
                             int(settings.allowed_lateness_s * 1000),
                             encoded=encode_fact_bodies())  # the worker only writes its facts out
        self.out = AckedProducer(settings.kafka_bootstrap, client)
        self.changelog = Changelog(settings.kafka_bootstrap, t, self.out.producer, client)
        self.unit_topics = list(self.engine.unit_topics)
        self.bcast_topics = list(self.engine.broadcast_topics)
        self.paced = {t.k8s.name, t.podresources.name, t.dcgm.name, t.vgpu.name, t.requests.name, t.model_metrics.name}
        self.pacer = Pacer(int(settings.read_ahead_s * 1000))
        self.owned: set[int] = set()
        self.dirty: set[int] = set()
        self.closing = False
        self.assigned = False  # an assignment from the group (possibly empty) is in force
        self.stats = {"records": 0, "facts": 0, "commits": 0, "passes": 0}
        self.last_commit = self.started = time.monotonic()
        base = {"bootstrap.servers": settings.kafka_bootstrap, **client, "enable.auto.commit": False, "log_level": 3,
                **SOURCE_FETCH,  # small fetches: what they bring is held decoded (bus/fetch.py)
                "auto.offset.reset": "earliest", "enable.partition.eof": False}
        self.group = Consumer({**base, "group.id": job.group, "partition.assignment.strategy": "range",
                               "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
                               "max.poll.interval.ms": 600_000})
        self.bc = Consumer({**base, "group.id": f"{job.group}-broadcast-reader"})
        self.extents: dict[str, tuple[int, int]] = {}
        self.highs: dict[str, int] = {}

    # -- positions -------------------------------------------------------------------
    def _refresh_extents(self) -> None:
        names = sorted(set(self.unit_topics) | set(self.bcast_topics))
        self.extents = read_extents(self.s.kafka_bootstrap, names, client=self.client)
        stop = self.job.stop_offsets
        if stop is not None:
            self.extents = {k: (low, min(high, stop.get(k, low))) for k, (low, high) in self.extents.items()}
        self.engine.extents = self.extents
        if self.job.until_caught_up and not self.highs:
            self.highs = {k: high for k, (_, high) in self.extents.items()}
        self._positions()

    def _positions(self) -> None:
        """Lag per partition and the newest event time per source topic, for /metrics."""
        times = dict(self.engine.bcast.partition_wm)  # event times of records taken (not of refused ones)
        for n in self.owned:
            unit = self.engine.units.get(n)
            if unit is not None:
                times.update({f"{t}:{n}": ts for t, ts in unit.wm.items()})
        self.metrics.positions(self.extents, self._next_offsets(), times, self.paced)

    def _next_offsets(self) -> dict[str, int]:
        out = dict(self.engine.bcast.next_offsets)
        for n in self.owned:  # a unit's own position, never the broadcast's read of the same partition
            u = self.engine.units.get(n)
            for topic in self.unit_topics:
                k = f"{topic}:{n}"
                out[k] = u.next_offsets[k] if u is not None and k in u.next_offsets else \
                    self.extents.get(k, (0, 0))[0]
        return out

    def _end(self, key: str) -> int:
        if self.job.until_caught_up or self.job.stop_offsets is not None:
            return self.highs.get(key, self.extents.get(key, (0, 0))[1])
        return self.extents.get(key, (0, 0))[1]

    # -- rebalance -----------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.closing:  # an assignment served while leaving the group: nothing to take on
            return
        numbers = sorted({tp.partition for tp in partitions})
        self.assigned = True
        committed = {f"{tp.topic}:{tp.partition}": tp.offset for tp in committed_offsets(consumer, partitions)}
        rebuild = False
        for n in numbers:
            unit = self.engine.units.get(n)
            keep = unit is not None and bool(unit.next_offsets) and n not in self.dirty and all(
                unit.next_offsets.get(f"{t}:{n}", 0) == max(committed.get(f"{t}:{n}", 0), 0) for t in self.unit_topics
                if f"{t}:{n}" in unit.next_offsets)
            if not keep:
                state = self.changelog.read_unit(n)
                rebuild |= not self.engine.add_unit(n, state)
                self.progress(f"worker: unit {n} {'restored from its changelog' if state else 'starts empty'}")
        for n in list(self.engine.units):
            if n not in numbers:
                self.engine.drop_unit(n)
        self.owned, self.dirty = set(numbers), set()
        self.engine.held = set(numbers)
        for tp in partitions:
            unit = self.engine.units[tp.partition]
            tp.offset = unit.next_offsets.get(f"{tp.topic}:{tp.partition}", OFFSET_BEGINNING)
        consumer.assign(partitions)
        consumer.resume(partitions)  # librdkafka keeps a partition's pause across assignments: start even
        self.pacer.forget(lambda k: k[0] not in self.unit_topics)  # read again from the units' offsets
        for tp in partitions:
            self.pacer.took((tp.topic, tp.partition), self.engine.units[tp.partition].wm.get(tp.topic, NEG_INF))
        if rebuild:
            self.progress("worker: a moved unit needs watch history this worker forgot; reading the broadcast again")
            self._start_broadcast(None)
        self.progress(f"worker: holds units {numbers}")

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self.closing:  # leaving: the last commit was just made
            self._commit(self.owned)
        self.owned, self.assigned = set(), False

    # -- broadcast -----------------------------------------------------------------------
    def _start_broadcast(self, state: dict | None) -> None:
        self.engine.reset_broadcast(state)
        md = self.bc.list_topics(timeout=10).topics
        tps = []
        for name in self.bcast_topics:
            for p in sorted(md[name].partitions):
                tps.append(TopicPartition(name, p, self.engine.bcast.next_offsets.get(f"{name}:{p}", OFFSET_BEGINNING)))
        self.bc.assign(tps)
        self.bc.resume(tps)
        self.pacer.forget(lambda k: k[0] not in self.bcast_topics or k[0] in self.unit_topics)

    # -- the commit protocol ---------------------------------------------------------------
    def _produce_facts(self, closing: bool = False) -> None:
        batch = self.engine.advance(closing)
        facts = self.topics.facts
        # the bulk kinds in batch records (streams/fact_batches.py), the rest one at a time; the
        # producer's own produce, for speed (room() when its queue is full)
        emit_batched(batch, {kind: facts[kind].name for kind in FACT_KINDS}, self.out.producer.produce,
                     self.out.room, self._unencodable)
        self.out.poll()
        counts = (len(batch.capacity), len(batch.utilization), len(batch.requests), len(batch.demand))
        self.stats["facts"] += sum(counts) + len(batch.models)
        # the samples waiting are counted with the progress line (``_report``, every 2 s): counting
        # them walks every node's queue, ~1 % of a worker when done every pass
        self.metrics.flushed(*counts, None, 0.0)
        self.metrics.skipped(self.engine.take_series_skipped())
        self.engine.take_references()  # the sink reads the reference topic itself

    def _unencodable(self, kind: str, fact, exc: Exception) -> None:
        """A fact the wire cannot carry (a value no check before it caught): its source record is
        dead-lettered by position, the rest of the batch goes on; stopping here would stop on it
        again at every restart."""
        where = f"{getattr(fact, 'src_topic', '?')}/{getattr(fact, 'src_partition', '?')}@{getattr(fact, 'src_offset', '?')}"
        self.engine.dead_letter(where, f"{type(exc).__name__}: {kind} fact not encodable: {exc}", b"")

    def _flush(self) -> None:
        self.out.flush()
        self.dead.flush()

    def _commit(self, numbers: set[int], closing: bool = False) -> None:
        self._produce_facts(closing)  # 1. the facts of every record the snapshots count, parked ones taken since included
        self._flush()  # ... and acknowledged, with the dead letters
        for n in sorted(numbers):
            if n in self.engine.units:
                self.changelog.write_unit(n, self.engine.unit_state(n))  # 2. state + its offsets
        self.changelog.write_broadcast(self.engine.broadcast_state())
        self.metrics.snapshots(self.changelog.last_bytes)
        for part in self.engine.progress():
            if part["part"] != "broadcast" and int(part["part"].split("-")[1]) not in numbers:
                continue
            self.out.produce(self.topics.progress.name, part["part"].encode(), orjson.dumps(part))
        self._flush()
        offsets = [TopicPartition(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1]), v)
                   for n in sorted(numbers) if n in self.engine.units
                   for k, v in self.engine.units[n].next_offsets.items()]
        if offsets:
            commit_offsets(self.group, offsets, self.progress)  # 3. only now
        self.dirty -= numbers
        self.stats["commits"] += 1
        trim_heap()  # what the batches since the last commit freed goes back to the system (streams/heap.py)
        self.last_commit = time.monotonic()

    # -- pacing ---------------------------------------------------------------------------
    def _pace(self) -> int:
        nxt = self._next_offsets()
        live, done, consumers = [], [], {}
        for key, consumer in self._paced_partitions():
            consumers[key] = consumer
            k = f"{key[0]}:{key[1]}"
            (done if nxt.get(k, self.extents.get(k, (0, 0))[0]) >= self._end(k) else live).append(key)
        counted: dict[str, int] = {}

        def take(msg) -> None:
            handle = self._unit_record if msg.topic() in self.unit_topics else self._broadcast_record
            if handle(msg, paced=False):
                counted[msg.topic()] = counted.get(msg.topic(), 0) + 1

        taken = self.pacer.pace(live, done, take, lambda key: consumers[key].pause([TopicPartition(*key)]),
                                lambda key: consumers[key].resume([TopicPartition(*key)]))
        self.metrics.consumed_counts(counted)
        return taken

    def _paced_partitions(self):
        for n in self.owned:
            for topic in self.unit_topics:
                if topic in self.paced:
                    yield (topic, n), self.group
        for key in self.extents:
            topic, p = key.rsplit(":", 1)
            if topic in self.bcast_topics and topic not in self.unit_topics and topic in self.paced:
                yield (topic, int(p)), self.bc

    # -- the loop ---------------------------------------------------------------------------
    def caught_up(self) -> bool:
        """Every partition this job reads is read to its end: the owned units by this worker,
        the others by the group (committed offsets), and the broadcast. Asked only while an
        assignment from the group is in force (not before the first, nor during a rebalance):
        committed offsets at the end do not mean a
        unit's facts are out (a worker killed after reading everything leaves segments waiting
        for the watch in its snapshot; its next owner restores them and emits them)."""
        nxt = self._next_offsets()
        for key in self.extents:
            topic, p = key.rsplit(":", 1)
            if topic in self.unit_topics and int(p) not in self.owned:
                continue
            if nxt.get(key, self.extents[key][0]) < self._end(key):
                return False
        others = [TopicPartition(t, n) for t in self.unit_topics for n in range(self.topics.podresources.partitions)
                  if n not in self.owned]
        if others:
            for tp in committed_offsets(self.group, others):
                key = f"{tp.topic}:{tp.partition}"
                if max(tp.offset, self.extents.get(key, (0, 0))[0]) < self._end(key):
                    return False
        return True

    def run(self) -> int:
        self._refresh_extents()
        self._start_broadcast(self.changelog.read_broadcast())
        self.group.subscribe(self.unit_topics, on_assign=self._on_assign, on_revoke=self._on_revoke)
        last_extents = last_report = started = time.monotonic()
        batch = self.s.batch_max_records
        got = 0
        try:
            while not self.should_stop():
                # consume() waits its timeout for a full batch: only when the last pass found nothing
                waits = (0.05, 0.2) if got == 0 else (0.0, 0.0)
                got = 0
                for (consumer, handle), wait_s in zip(((self.bc, self._broadcast_record),
                                                       (self.group, self._unit_record)), waits):
                    msgs = consumer.consume(num_messages=batch, timeout=wait_s)
                    counted: dict[str, int] = {}
                    for msg in msgs:
                        if msg.error():
                            continue
                        topic = handle(msg)
                        if topic:
                            counted[topic] = counted.get(topic, 0) + 1
                    self.metrics.consumed_counts(counted)
                    got += len(msgs)
                    del msgs  # the records' values are not held while facts are made
                self.stats["records"] += got
                if self.assigned:  # unassigned, it holds no unit: facts made now would be another worker's too
                    self._produce_facts()
                    self.stats["passes"] += 1
                got += self._pace()  # parked records taken now: their facts go out on the next pass or commit
                now = time.monotonic()
                if now - last_extents >= 5.0 and not self.job.until_caught_up and self.job.stop_offsets is None:
                    self._refresh_extents()
                    last_extents = now
                if now - self.last_commit >= self.s.checkpoint_interval_s and self.owned:
                    self._commit(set(self.owned))
                if now - last_report >= 2.0:
                    last_report = now
                    self._report()
                    self._positions()
                if got == 0 and (self.job.until_caught_up or self.job.stop_offsets is not None) \
                        and now - started >= 1.0 and self.assigned and self.caught_up():
                    if self.owned:  # all read: the capacity windows still open go out as they stand
                        self._commit(set(self.owned), closing=True)
                    if self.caught_up():
                        self._report()
                        self._positions()
                        self.progress("worker: caught up")
                        return 0
            self._commit(set(self.owned))
            return 0
        finally:
            self.closing = True
            for consumer in (self.group, self.bc):
                try:
                    consumer.close()
                except KafkaException as exc:  # leaving after the last commit: nothing left to lose
                    log.warning("worker: closing a consumer: %s", exc)

    def _unit_record(self, msg, paced: bool = True) -> str | None:
        topic, p = msg.topic(), msg.partition()
        if p not in self.owned:
            return None  # fetched before a rebalance moved the unit away
        stop = self._end(f"{topic}:{p}") if self.job.stop_offsets is not None else None
        if stop is not None and msg.offset() >= stop:
            return None
        if paced and topic in self.paced and not self.pacer.admit(msg):
            return None  # parked: taken when the other sources catch up
        if self.engine.handle_unit(topic, p, msg.offset(), msg.value()):
            self.dirty.add(p)
        self.pacer.took((topic, p), msg.timestamp()[1])
        return topic

    def _broadcast_record(self, msg, paced: bool = True) -> str | None:
        topic, p = msg.topic(), msg.partition()
        if self.job.stop_offsets is not None and msg.offset() >= self._end(f"{topic}:{p}"):
            return None
        own = topic not in self.unit_topics  # unit topics: read in full for the broadcast's directory only
        if paced and own and topic in self.paced and not self.pacer.admit(msg):
            return None
        self.engine.handle_broadcast(topic, p, msg.offset(), msg.value(), dead_letter=own)
        if own:
            self.pacer.took((topic, p), msg.timestamp()[1])
            return topic
        return None

    def _report(self) -> None:
        nxt = self._next_offsets()
        left = sum(max(0, self._end(k) - nxt.get(k, low)) for k, (low, _) in self.extents.items()
                   if k.rsplit(":", 1)[0] in self.bcast_topics or int(k.rsplit(":", 1)[1]) in self.owned)
        rate = self.stats["records"] / max(time.monotonic() - self.started, 1e-9)
        now, peak = resident_mib()
        eta = f", ETA {left / rate:,.0f} s" if rate > 0 and (self.job.until_caught_up or self.job.stop_offsets) else ""
        waiting = self.engine.pending_samples()
        self.metrics.pending_samples.set(waiting)
        per_pass = self.stats["records"] / max(self.stats["passes"], 1)
        self.progress(f"worker: {self.stats['records']} records ({rate:,.0f}/s, {per_pass:,.0f} a pass), "
                      f"{self.stats['facts']} facts, "
                      f"{waiting} samples waiting, units {sorted(self.owned)}, "
                      f"{left} records to go{eta}, {len(self.pacer.paused)} partitions paused ahead ({self.pacer.parked_records()} records parked, "
                      f"{self.pacer.parked_bytes / 2**20:.1f} MiB), largest snapshot "
                      f"{max(self.changelog.last_bytes.values(), default=0) >> 10:,} KiB, RSS {now:,.0f} MiB (peak {peak:,.0f})")


def run_worker(settings: Settings, job: WorkerJob, progress: Callable[[str], None], wall_ms: Callable[[], int],
               should_stop: Callable[[], bool]) -> int:
    collect_for_the_data_path()
    worker = Worker(settings, job, progress, wall_ms, should_stop)
    if settings.worker_metrics_port >= 0:
        port = worker.metrics.serve(settings.worker_metrics_port, settings.metrics_addr,
                                    settings.metrics_secret())
        progress(f"worker: metrics at http://{settings.metrics_addr}:{port}/metrics")
    return worker.run()
