"""``gpuledger sink``: the fact topics into ClickHouse, in large columnar batches.

The sink's consumer group reads the fact topics (capacity, utilization, requests, demand),
``facts.progress`` and the reference documents. A batch record of the bulk kinds
(streams/fact_batches.py) whose every fact passes the checks is kept whole, its facts copied
once, into the store's container (sinks/fact_sink.py ``gather``); another is split into its
facts, and one that is not a whole batch is dead-lettered whole with its position. Per batch:

  1. decode the facts of each kind in one call and write them (idempotent: the tables
     deduplicate by fact id, so a batch written twice after a crash changes nothing); a row
     the store refuses for good is bisected out and dead-lettered (sinks/isolate.py);
  2. write the valid reference documents (inventory, rate cards, quotas, credits: each kept
     in the reference history, published_at its record's ingested_at) and the
     progress rows (a replay's sink takes reference documents only below its stop offsets:
     those published after the replayed period closed are not the ones it was priced with);
  3. only then commit the batch's offsets.

While the store refuses writes for a while (transient), the same batch is retried with
exponential backoff and nothing is committed; a store that refuses every write for good
stops the sink (exit 1) naming the table and the fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import orjson
from confluent_kafka import Consumer, TopicPartition

from gpuledger.domain.inventory import parse_inventory
from gpuledger.schemas import Codec
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.fact_sink import FactSink
from gpuledger.sinks.freshness import FreshnessHistogram
from gpuledger.sinks.progress import progress_checkpoint
from gpuledger.streams.fact_batches import BATCH_MAX_BYTES, is_batch
from gpuledger.streams.engine import REFERENCE_PARSERS
from gpuledger.bus.offsets import commit_offsets, committed_offsets, read_extents
from gpuledger.bus.topics import Topics

__all__ = ["SinkLoop", "SinkStopped"]

log = logging.getLogger(__name__)

POLL_RECORDS = 1_000  # records one poll takes at most
# The most facts a record brings: a batch record's bodies are at most BATCH_MAX_BYTES and no
# fact's body is under 128 bytes (the smallest seen: ~210); raised if a record ever brings more.
RECORD_FACTS_MAX = BATCH_MAX_BYTES // 128


class SinkStopped(RuntimeError):
    """The sink stopped without writing its batch; the message says why and what to do."""


class SinkLoop:
    def __init__(self, bootstrap: str, topics: Topics, store, group: str, dead_letter: Callable[[str, str, bytes], None],
                 dead_letter_flush: Callable[[], None], progress: Callable[[str], None], lock: threading.Lock,
                 should_stop: Callable[[], bool], batch_records: int = 50_000, on_store_error=None,
                 client: Mapping[str, str] | None = None, reference_stops: Mapping[str, int] | None = None) -> None:
        self.bootstrap, self.topics, self.store, self.progress = bootstrap, topics, store, progress
        self.client = dict(client or {})
        self.lock, self.should_stop, self.batch_records = lock, should_stop, batch_records
        self.on_store_error = on_store_error or (lambda transient: None)
        self.dead_letter_flush = dead_letter_flush
        self.facts = FactSink(store, dead_letter)
        self.kinds = {spec.name: kind for kind, spec in topics.facts.items()}
        self.names = [*self.kinds, topics.progress.name, topics.reference.name]
        self.reference_codec = Codec("reference_document")
        self.reference_stops = dict(reference_stops) if reference_stops is not None else None  # "topic:p" -> stop
        self.consumer = Consumer({"bootstrap.servers": bootstrap, **self.client, "group.id": group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3,
                                  "fetch.max.bytes": 52_428_800,
                                  "max.partition.fetch.bytes": 8_388_608, "queued.max.messages.kbytes": 65_536,
                                  "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
                                  "max.poll.interval.ms": 900_000})
        self.consumer.subscribe(self.names)
        self.record_facts_max = RECORD_FACTS_MAX  # the most facts one record read may bring
        self.written = {"capacity": 0, "utilization": 0, "requests": 0, "demand": 0, "models": 0}
        self.positions: dict[str, int] = {}
        self.freshness = FreshnessHistogram()  # observed_at -> stored, of utilization facts (sinks/freshness.py)
        self.wall_ms = lambda: int(time.time() * 1000)

    def step(self, timeout_s: float = 0.5) -> int:
        """One write: polls until ``batch_records`` facts are in hand, each asking for only as
        many records as could not take it past them were each as full as the fullest record
        can be (``record_facts_max``; at most ``POLL_RECORDS``, at least one). A write so holds
        fewer than ``batch_records + record_facts_max`` facts whatever the mix of records on
        the topics: single facts (demand, requests) ahead of full batch records once made a
        poll ask for 1,000 records and a write take ~240,000 facts. Then the write and the
        commit."""
        msgs: list = []
        by_kind: dict[str, list] = {}  # a kind: its values, single facts and CheckedBatch records
        progress, references = [], []
        facts, wait = 0, timeout_s
        while facts < self.batch_records and len(msgs) < self.batch_records:
            ask = max(1, min(POLL_RECORDS, self.batch_records - len(msgs),
                             (self.batch_records - facts) // self.record_facts_max))
            got = [m for m in self.consumer.consume(num_messages=ask, timeout=wait) if not m.error()]
            if not got:
                break
            wait = 0.0  # what is fetched already, no waiting for more
            largest = 1
            for m in got:
                topic = m.topic()
                kind = self.kinds.get(topic)
                if kind is not None:
                    values = by_kind.setdefault(kind, [])
                    if is_batch(m.headers()):  # a worker's batch record: kept whole once checked, else split
                        added = self.facts.gather(values, kind, m.value(), f"{topic}/{m.partition()}@{m.offset()}")
                    else:
                        values.append(m.value())
                        added = 1
                    facts += added
                    largest = max(largest, added)
                elif topic == self.topics.progress.name:
                    progress.append(orjson.loads(m.value()))
                elif self.reference_stops is None or \
                        m.offset() < self.reference_stops.get(f"{topic}:{m.partition()}", 0):
                    references.append(m.value())
            msgs += got
            self.record_facts_max = max(self.record_facts_max, largest)  # a writer with larger batches
        if not msgs:
            return 0
        self._write(by_kind, progress, references)
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            offsets[(m.topic(), m.partition())] = m.offset() + 1
        commit_offsets(self.consumer, [TopicPartition(t, p, o) for (t, p), o in offsets.items()], self.progress)
        for (t, p), o in offsets.items():
            self.positions[f"{t}:{p}"] = o
        return len(msgs)

    def _write(self, by_kind: dict[str, list], progress: list[dict], references: list[bytes]) -> None:
        delay, down_since = 0.5, None
        while True:
            try:
                with self.lock:
                    counts = self.facts.write_grouped(by_kind)
                    self._references(references)
                    for part in progress:
                        self.store.save_checkpoint(*progress_checkpoint(part))
                self.dead_letter_flush()
                break
            except StoreError as exc:
                self.on_store_error(exc.transient)
                if not exc.transient:
                    table = f"{self.store.db}.{exc.table}" if exc.table else "the store"
                    raise SinkStopped(
                        f"sink: ClickHouse refuses every write to {table}, whatever the rows: {exc}. Fix: make {table} "
                        "writable again (a dropped table is re-created by starting `gpuledger process` or `gpuledger "
                        "sink`, which create missing tables; check grants and the DSN), then start again: nothing unwritten was "
                        "committed, so it resumes there and loses nothing") from exc
                down_since = down_since or time.monotonic()
                if self.should_stop():
                    raise SinkStopped(f"sink: stopped while ClickHouse refused writes ({exc}); nothing unwritten was "
                                      "committed, so starting again resumes there and loses nothing") from exc
                self.progress(f"sink: ClickHouse unavailable for {time.monotonic() - down_since:.0f}s ({exc}); "
                              f"retrying in {delay:.1f}s")
                end = time.monotonic() + delay
                while time.monotonic() < end and not self.should_stop():
                    time.sleep(0.1)
                delay = min(delay * 2, 5.0)
        self.freshness.add(self.wall_ms(), self.facts.stored_observed_ms)
        if down_since is not None:
            self.progress(f"sink: ClickHouse back after {time.monotonic() - down_since:.0f}s; nothing lost")
        for kind, n in counts.items():
            self.written[kind] = self.written.get(kind, 0) + n

    def _references(self, values: list[bytes]) -> None:
        for raw in values:
            try:
                r = self.reference_codec.decode(raw)
                parse = REFERENCE_PARSERS[r["kind"]]
                doc = orjson.loads(r["document_json"])
                parsed = parse(doc)
            except Exception:  # noqa: BLE001 — refused: the worker dead-letters it; the previous one stays
                continue
            self.store.write_reference(r["cluster_id"], r["kind"], r["observed_at_ms"], r["document_json"],
                                       r["ingested_at_ms"])
            if r["kind"] == "inventory":
                self.store.write_inventory(r["cluster_id"], parsed if parsed is not None else parse_inventory(doc),
                                           r["ingested_at_ms"])

    def ends(self) -> dict[str, int]:
        return {k: high for k, (_, high) in read_extents(self.bootstrap, self.names, client=self.client).items()}

    def drain(self, ends: dict[str, int]) -> None:
        """Write everything up to ``ends`` (the fact topics' end offsets once the workers finished)."""
        left = {k: v for k, v in ends.items() if v > 0}
        last = time.monotonic()
        while not self.should_stop():
            self.step()
            to_go = sum(max(0, v - self._committed(k)) for k, v in left.items())
            if not to_go:
                return
            if time.monotonic() - last >= 10.0:
                last = time.monotonic()
                w = self.written
                self.progress(f"sink: catching up, {to_go} fact records to go; {w['capacity']} capacity + "
                              f"{w['utilization']} utilization facts written")

    def _committed(self, key: str) -> int:
        if key in self.positions:
            return self.positions[key]
        topic, p = key.rsplit(":", 1)
        tp = committed_offsets(self.consumer, [TopicPartition(topic, int(p))])[0]
        self.positions[key] = max(tp.offset, 0)
        return self.positions[key]

    def close(self) -> None:
        self.consumer.close()
