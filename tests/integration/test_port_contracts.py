"""One contract suite per port, run against every adapter: the in-memory twin and the real
one (confluent-kafka on the broker; clickhouse-connect on the chdb engine)."""

import dataclasses
import os
import time
import typing
import uuid
from dataclasses import replace

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import BOOTSTRAP
from gpuledger.domain.facts import CapacityFact, FactBatch, UtilizationFact
from gpuledger.domain.requests import RequestFact
from gpuledger.bus.port import MAX_RECORD_BYTES, ListPublisher
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.sinks.base import Checkpoint, MemoryStore
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.isolate import TABLES, settle_batch, write_isolating
from gpuledger.streams.fact_batches import batch_container, checked_batch, emit_batched
from gpuledger.streams.fact_codec import BULK_KINDS, FACT_CLASSES, checked_kept, container, encode_fact

pytestmark = pytest.mark.integration


# -- Publisher -----------------------------------------------------------------------------
class KafkaUnderTest:
    def __init__(self):
        self.topic = f"contract-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
        admin.create_topics([NewTopic(self.topic, num_partitions=3, replication_factor=1)])[self.topic].result()
        self.publisher = KafkaPublisher(BOOTSTRAP)

    def read_back(self, expected: int):
        c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": self.topic, "enable.auto.commit": False})
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(3)])
        out, deadline = [], time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append((m.key(), m.value(), m.timestamp()[1], m.partition()))
        c.close()
        return sorted(out)


class ListUnderTest:
    def __init__(self):
        self.topic = "contract"
        self.publisher = ListPublisher({"contract": 3})

    def read_back(self, expected: int):
        return sorted((r.key, r.value, r.timestamp_ms, r.partition) for r in self.publisher.records)


@pytest.fixture(params=["list", "kafka"])
def publisher(request, broker):
    return ListUnderTest() if request.param == "list" else KafkaUnderTest()


def test_publisher_keeps_key_value_event_time_and_explicit_partition(publisher):
    p = publisher.publisher
    assert p.partitions(publisher.topic) == 3
    p.publish(publisher.topic, b"k1", b"v1", 1_790_000_000_000)
    p.publish(publisher.topic, b"k2", b"v2", 1_790_000_000_500, partition=2)
    p.flush()
    got = publisher.read_back(2)
    assert [(k, v, ts) for k, v, ts, _ in got] == [(b"k1", b"v1", 1_790_000_000_000), (b"k2", b"v2", 1_790_000_000_500)]
    assert got[1][3] == 2


def test_publisher_rejects_a_partition_out_of_range(publisher):
    with pytest.raises(ValueError, match="partition 7 out of range"):
        publisher.publisher.publish(publisher.topic, b"k", b"v", 1, partition=7)


def test_publisher_takes_a_record_of_its_limit_whole(publisher):
    p = publisher.publisher
    assert p.max_record_bytes == MAX_RECORD_BYTES  # what ingest checks against before publishing
    value = os.urandom(p.max_record_bytes - 3)  # incompressible: the broker sees its full size
    p.publish(publisher.topic, b"big", value, 1_790_000_000_000)
    p.flush()
    (got,) = publisher.read_back(1)
    assert got[:3] == (b"big", value, 1_790_000_000_000)


# -- FactStore -----------------------------------------------------------------------------
def _cap(i: int, tenant: str = "t") -> CapacityFact:
    return CapacityFact(
        fact_id=f"c{i}", cluster_id="cl", kind="allocated", gpu_uuid="GPU-1", device_id="GPU-1", node="n",
        gpu_class="H100", mode="exclusive", profile="", capacity_fraction=1.0, valid_from_ms=1_790_000_000_000 + i,
        valid_to_ms=1_790_000_030_000 + i, tenant_id=tenant, project_id="p", cost_center="cc", namespace="ns",
        namespace_uid="nsu", pod_name="pod", pod_uid="uid", container="main", endpoint_id="", confidence="high",
        workload_kind="pod", reason="", src_topic="topic", src_partition=0, src_offset=i)


def _util(i: int) -> UtilizationFact:
    return UtilizationFact(
        fact_id=f"u{i}", cluster_id="cl", gpu_uuid="GPU-1", device_id="GPU-1", node="n",
        observed_at_ms=1_790_000_000_000 + i, span_ms=10_000, sm_active_ratio=0.5, fb_used_bytes=None, power_w=100.0,
        energy_j=None, capacity_fact_id="c0", kind="allocated", tenant_id="t", project_id="p", namespace="ns",
        pod_name="pod", pod_uid="uid", confidence="high", reason="", src_topic="topic", src_partition=0, src_offset=i)


def _req(i: int) -> RequestFact:
    return RequestFact(
        fact_id=f"r{i}", cluster_id="cl", endpoint_id="chat", model="m", revision="1", request_id=f"q{i}",
        tenant_id="t", project_id="p", observed_at_ms=1_790_000_000_000 + i, arrived_at_ms=1_790_000_000_000,
        outcome="success", input_tokens=10, output_tokens=5, queue_s=0.01, ttft_s=0.1, e2e_s=0.5,
        src_topic="topic", src_partition=0, src_offset=i)


class ChStore:
    def __init__(self, path):
        self.store = ClickHouseStore(f"chdb://{path}")
        self.store.ensure_schema()

    def fact_ids(self):
        return ({r[0] for r in self.store.query("SELECT fact_id FROM gpuledger.capacity_facts FINAL")[1]},
                {r[0] for r in self.store.query("SELECT fact_id FROM gpuledger.utilization_facts FINAL")[1]},
                {r[0] for r in self.store.query("SELECT fact_id FROM gpuledger.request_facts FINAL")[1]},
                self.store.query("SELECT count() FROM gpuledger.capacity_facts FINAL")[1][0][0])

    def read_back(self, kind: str) -> list:
        cls = FACT_CLASSES[kind]
        names = [f.name for f in dataclasses.fields(cls)]
        table = TABLES.get(kind, "gpu_health_facts")
        rows = self.store.query(f"SELECT {', '.join(names)} FROM gpuledger.{table} FINAL ORDER BY fact_id")[1]
        return [cls(*r) for r in rows]

    def reference_rows(self) -> int:
        return self.store.query("SELECT count() FROM gpuledger.reference_history FINAL")[1][0][0]

    def close(self):
        self.store.close()


class MemStore:
    def __init__(self, _path):
        self.store = MemoryStore()

    def fact_ids(self):
        return set(self.store.capacity), set(self.store.utilization), set(self.store.requests), len(self.store.capacity)

    def read_back(self, kind: str) -> list:
        return sorted(getattr(self.store, kind).values(), key=lambda f: f.fact_id)

    def reference_rows(self) -> int:
        return sum(len(docs) for docs in self.store.references.values())

    def close(self):
        pass


@pytest.fixture(params=["memory", "clickhouse"])
def store(request, tmp_path):
    s = (MemStore if request.param == "memory" else ChStore)(tmp_path / "ch")
    yield s
    s.close()


def test_store_writes_are_idempotent_by_fact_id(store):
    store.store.write_facts(FactBatch([_cap(0), _cap(1)], [_util(0)], [_req(0)]))
    store.store.write_facts(FactBatch([_cap(1), _cap(2)], [_util(0), _util(1)], [_req(0), _req(1)]))  # replayed batch
    caps, utils, reqs, rows = store.fact_ids()
    assert caps == {"c0", "c1", "c2"} and utils == {"u0", "u1"} and reqs == {"r0", "r1"} and rows == 3


def _any_fact(kind: str, i: int):
    """A fact of ``kind`` with every field set from ``i`` (odd ``i``: every nullable field None)."""
    cls = FACT_CLASSES[kind]
    hints, values = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        base = [a for a in typing.get_args(hints[f.name]) if a is not type(None)] or [hints[f.name]]
        if len(typing.get_args(hints[f.name])) > 1 and i % 2:
            values[f.name] = None
        elif base[0] is str:
            values[f.name] = f"{f.name}-{i}-ü" if f.name != "fact_id" else f"{kind[0]}{i:03d}"
        elif base[0] is int:
            values[f.name] = 1_790_000_000_000 + i if f.name.endswith("_ms") else i
        else:
            values[f.name] = 0.25 + i
    return cls(**values)


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_facts_handed_over_encoded_read_back_whole_and_idempotent(store, kind):
    facts = [_any_fact(kind, i) for i in range(6)]
    values = [encode_fact(kind, f) for f in facts]
    assert checked_kept(kind, values) is not None  # (what the sink checks before it writes them whole)
    store.store.write_encoded(kind, container(kind, values))
    store.store.write_encoded(kind, container(kind, values[2:]))  # written again: no row twice
    assert store.read_back(kind) == facts


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_batch_records_handed_over_in_one_container_of_many_blocks_read_back_whole(store, kind):
    """What the sink hands the store from a worker's batch records (streams/fact_batches.py
    ``batch_container``): a block of the container a block of their arrays."""
    facts = [_any_fact(kind, i) for i in range(9)]
    records = []
    emit_batched(FactBatch(**{kind: facts}), {kind: "t"}, lambda t, value, key, headers=None: records.append(value),
                 lambda: None, max_bytes=1)  # a record a fact
    emit_batched(FactBatch(**{kind: facts[3:7]}), {kind: "t"},
                 lambda t, value, key, headers=None: records.append(value), lambda: None)  # four in one: again
    checked = [(value, checked_batch(kind, value)[2]) for value in records]
    assert len(checked) == 10 and sum(len(spans) for _, spans in checked) == 10
    store.store.write_encoded(kind, batch_container(kind, checked))
    assert store.read_back(kind) == facts


def test_store_gives_back_the_recorded_requests_whole(store):
    store.store.write_facts(FactBatch(requests=[_req(0), _req(1), replace(_req(2), queue_s=None, ttft_s=None)]))
    known = store.store.known_requests(["r2", "r0", "r9", "r0"])
    assert known == {"r0": _req(0), "r2": replace(_req(2), queue_s=None, ttft_s=None)}


def test_a_forged_repeat_of_a_request_does_not_replace_it(store):
    forged = replace(_req(0), tenant_id="victim", output_tokens=10**9, src_offset=99)
    conflicts = []
    for batch in (FactBatch(requests=[_req(0)]), FactBatch(requests=[forged, _req(1)])):
        write_isolating(store.store, settle_batch(store.store, batch, lambda f, r: conflicts.append((f, r))),
                        lambda *a: None)
    assert store.store.known_requests(["r0", "r1"]) == {"r0": _req(0), "r1": _req(1)}
    assert [f.src_offset for f, _ in conflicts] == [99]
    assert "tenant_id 'victim' (recorded 't')" in conflicts[0][1] and "topic/0@0" in conflicts[0][1]


def test_store_returns_the_latest_checkpoint(store):
    assert store.store.load_checkpoint("p") is None
    store.store.save_checkpoint("p", Checkpoint(1, {"t:0": 5}, {"x": 1}))
    store.store.save_checkpoint("p", Checkpoint(2, {"t:0": 9}, {"x": 2}))
    store.store.save_checkpoint("other", Checkpoint(7, {}, {}))
    cp = store.store.load_checkpoint("p")
    assert (cp.seq, cp.offsets, cp.state) == (2, {"t:0": 9}, {"x": 2})


CARD_A, CARD_B, CARD_C = ('[{"version": "a"}]', '[{"version": "b"}]', '[{"version": "c"}]')


def test_store_keeps_every_reference_document_once(store):
    """Append-only: a later document never replaces an earlier one (whatever their validity);
    the same document delivered again is one row, at its latest publication."""
    s = store.store
    s.write_reference("cl", "ratecards", 100, CARD_A, 1_000)
    s.write_reference("cl", "ratecards", 200, CARD_B, 2_000)
    s.write_reference("cl", "ratecards", 50, CARD_C, 3_000)  # valid from earlier, published last
    s.write_reference("cl", "ratecards", 100, CARD_A, 1_000)  # delivered again
    s.write_reference("cl", "quotas", 100, "[]", 1_500)
    s.write_reference("other", "ratecards", 100, CARD_A, 9_000)
    assert s.reference_history("cl", "ratecards") == [(3_000, 50, CARD_C), (2_000, 200, CARD_B), (1_000, 100, CARD_A)]
    assert store.reference_rows() == 5
    s.write_reference("cl", "ratecards", 100, CARD_A, 4_000)  # the same document published again
    assert s.reference_history("cl", "ratecards") == [(4_000, 100, CARD_A), (3_000, 50, CARD_C), (2_000, 200, CARD_B)]
    assert store.reference_rows() == 5
    assert s.reference_history("cl", "quotas") == [(1_500, 100, "[]")]
    assert s.reference_history("other", "ratecards") == [(9_000, 100, CARD_A)]
    assert s.reference_history("cl", "credits") == [] and s.reference_history("nowhere", "ratecards") == []


def test_a_store_from_before_the_history_keeps_its_documents(tmp_path):
    """A database written before ``reference_history`` existed: ``ensure_schema`` adds the
    table, and the documents it kept (one per kind) are read as the oldest publications, also
    once a later document replaced them in ``reference_documents``."""
    ch = ChStore(tmp_path / "ch")
    s = ch.store
    s.command("DROP TABLE gpuledger.reference_history")  # as the schema was before it
    s.insert("reference_documents", [["cl", "ratecards", 100, CARD_A], ["cl", "quotas", 100, "[]"]],
             ["cluster_id", "kind", "observed_at_ms", "document"])
    s.ensure_schema()
    assert s.reference_history("cl", "ratecards") == [(-1, 100, CARD_A)]
    s.write_reference("cl", "ratecards", 200, CARD_B, 2_000)
    s.write_reference("cl", "quotas", 100, "[]", 2_500)  # kept before, published again: once
    assert s.reference_history("cl", "ratecards") == [(2_000, 200, CARD_B), (-1, 100, CARD_A)]
    assert s.reference_history("cl", "quotas") == [(2_500, 100, "[]")]
    assert s.query("SELECT document FROM gpuledger.reference_documents FINAL WHERE kind = 'ratecards'")[1] == [
        (CARD_B,)]
    ch.close()


# -- Ledger --------------------------------------------------------------------------------
@pytest.fixture(params=["memory", "clickhouse"])
def ledger(request, tmp_path):
    from gpuledger.sinks.ledger_store import ClickHouseLedger, MemoryLedger

    if request.param == "memory":
        yield MemoryLedger()
        return
    s = ChStore(tmp_path / "ch")
    yield ClickHouseLedger(s.store)
    s.close()


def test_ledger_keeps_the_first_document_of_a_period(ledger):
    assert ledger.get("2026-10") is None and ledger.closed() == []
    ledger.append("2026-10", "sha256:a", 2, {"period": "2026-10", "hash": "sha256:a", "lines": [{"amount": "1.00"}]})
    ledger.append("2026-09", "sha256:b", 3, {"period": "2026-09", "hash": "sha256:b", "lines": []})
    ledger.append("2026-10", "sha256:c", 5, {"period": "2026-10", "hash": "sha256:c", "lines": []})  # never wins
    assert ledger.get("2026-10")["hash"] == "sha256:a"
    assert [d["hash"] for d in ledger.closed()] == ["sha256:b", "sha256:a"]  # in period order


def test_ledger_keeps_prepared_documents_apart_and_the_latest_counts(ledger):
    assert ledger.prepared("2026-10") is None
    ledger.prepare("2026-10", "sha256:p1", 2, {"period": "2026-10", "status": "prepared", "n": 1})
    ledger.prepare("2026-10", "sha256:p2", 4, {"period": "2026-10", "status": "prepared", "n": 2})
    ledger.prepare("2026-10", "sha256:p3", 3, {"period": "2026-10", "status": "prepared", "n": 3})  # older
    ledger.prepare("2026-09", "sha256:p4", 9, {"period": "2026-09", "status": "prepared", "n": 4})
    assert ledger.prepared("2026-10")["n"] == 2 and ledger.prepared("2026-09")["n"] == 4
    assert ledger.get("2026-10") is None and ledger.closed() == []  # prepared is not closed
