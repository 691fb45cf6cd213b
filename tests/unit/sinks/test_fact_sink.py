"""The fact sink (sinks/fact_sink.py): fact-topic values in, facts in the store; what is not
a fact, or is a row the store refuses for good, is dead-lettered alone and the rest written;
a store that is down or has lost its table fails the write and drops nothing."""

import dataclasses
import io
import math

import fastavro
import pytest

from gpuledger.domain.demand import DemandFact
from gpuledger.domain.facts import CapacityFact, FactBatch, UtilizationFact
from gpuledger.domain.requests import RequestFact
from gpuledger.schemas import latest_version, load_schema
from gpuledger.sinks import fact_sink
from gpuledger.sinks.base import MemoryStore, PermanentStoreError, StoreError
from gpuledger.sinks.fact_sink import FactSink
from gpuledger.sinks.failpoint import OutageStore
from gpuledger.streams.fact_batches import emit_batched, is_batch
from gpuledger.streams.fact_codec import BULK_KINDS, FACT_KINDS, encode_batch, encode_fact

T = 1_790_000_000_000


def cap(i: int) -> CapacityFact:
    return CapacityFact(f"c{i}", "prod", "allocated", f"GPU-{i}", f"GPU-{i}", "node-a", "h100", "exclusive", "", 1.0,
                        T, T + 60_000, "alpha", "p", "cc", "ns", "ns-uid", f"pod-{i}", f"uid-{i}", "main", "", "pod",
                        "high", "", "gpuledger.source.podresources", 0, 100 + i)


def util(i: int, gpu: str = "GPU-0") -> UtilizationFact:
    return UtilizationFact(f"u{i}", "prod", gpu, gpu, "node-a", T + i * 1000, 1000, 0.5, 2 ** 34, 300.0, 1e6 + i,
                           "c0", "allocated", "alpha", "p", "ns", "pod-0", "uid-0", "high", "", "gpuledger.source.dcgm",
                           2, 500 + i)


def req(i: int) -> RequestFact:
    return RequestFact(f"r{i}", "prod", "chat", "llama", "r1", f"req-{i}", "beta", "", T + 10, T, "success", 10, 20,
                       None, 0.1, 0.5, "gpuledger.source.requests", 1, 900 + i)


def dem(i: int) -> DemandFact:
    return DemandFact(f"d{i}", "prod", "gamma", "g-ns", f"infer-{i}", f"puid-{i}", "1g.10gb", 2, T, T + 300_000,
                      "scheduled")


def batch() -> FactBatch:
    return FactBatch([cap(i) for i in range(3)], [util(i, f"GPU-{i % 4}") for i in range(16)], [req(0), req(1)],
                     [dem(0), dem(1)])


def messages(b: FactBatch) -> list[tuple[str, bytes]]:
    return [(kind, value) for kind, _, value in encode_batch(b)]


def stored(store: MemoryStore) -> dict:
    return {k: getattr(store, k) for k in FACT_KINDS}


def expected(b: FactBatch, drop: set[str] = frozenset()) -> dict:
    return {k: {f.fact_id: f for f in getattr(b, k) if f.fact_id not in drop} for k in FACT_KINDS}


class Dead(list):
    def __call__(self, source: str, reason: str, raw: bytes) -> None:
        self.append((source, reason, raw))


class RefusingStore(MemoryStore):
    """Refuses for good any batch holding a fact whose id is in ``bad`` (a value that does not
    fit its column), or with ``table_gone`` every write to utilization_facts (and its probe)."""

    def __init__(self, bad: set[str] = frozenset(), table_gone: bool = False) -> None:
        super().__init__()
        self.bad, self.table_gone, self.writes = set(bad), table_gone, 0

    def write_facts(self, batch: FactBatch) -> None:
        self.writes += 1
        for kind, table in (("capacity", "capacity_facts"), ("utilization", "utilization_facts"),
                            ("requests", "request_facts"), ("demand", "demand_facts")):
            facts = getattr(batch, kind)
            if any(f.fact_id in self.bad for f in facts) or (facts and self.table_gone and kind == "utilization"):
                raise PermanentStoreError(f"insert into gpuledger.{table} failed: a value does not fit", table)
        super().write_facts(batch)

    def probe(self, table: str) -> None:
        if self.table_gone and table == "utilization_facts":
            raise PermanentStoreError("Table gpuledger.utilization_facts does not exist (UNKNOWN_TABLE)", table)


def test_every_kind_is_decoded_once_and_written_whole(monkeypatch):
    calls = []
    real = fact_sink.decode_facts
    monkeypatch.setattr(fact_sink, "decode_facts", lambda kind, values, on_error: calls.append(kind) or real(
        kind, values, on_error))
    store, dead, b = RefusingStore(), Dead(), batch()
    sink = FactSink(store, dead)
    assert sink.write(messages(b)) == {"capacity": 3, "utilization": 16, "requests": 2, "demand": 2, "models": 0,
        "health": 0, "health_incidents": 0}
    present = [k for k in FACT_KINDS if getattr(b, k)]
    bulk = [k for k in present if k in BULK_KINDS]
    assert bulk == ["capacity", "utilization"]  # handed over as they came, in a container each: never decoded here
    assert calls == [k for k in present if k not in BULK_KINDS] and store.writes == 1 + len(bulk) and dead == []
    assert stored(store) == expected(b)
    assert sink.write(messages(b)) == {"capacity": 3, "utilization": 16, "requests": 2, "demand": 2, "models": 0,
        "health": 0, "health_incidents": 0}  # idempotent
    assert stored(store) == expected(b)


def test_nothing_to_write_touches_nothing():
    store = RefusingStore()
    assert FactSink(store, Dead()).write([]) == dict.fromkeys(FACT_KINDS, 0)
    assert store.writes == 0
    assert FactSink(store, Dead()).write([("utilization", b"junk")]) == dict.fromkeys(FACT_KINDS, 0)
    assert store.writes == 0


def nan_value() -> bytes:
    """A utilization fact with power_w NaN, framed right but written by plain fastavro (not
    the codec, which refuses it)."""
    good = encode_fact("utilization", util(99))
    buf = io.BytesIO()
    buf.write(good[:5])
    fastavro.schemaless_writer(buf, load_schema("utilization_fact", latest_version("utilization_fact")),
                               dataclasses.asdict(dataclasses.replace(util(99), power_w=math.nan)))
    return buf.getvalue()


def test_values_that_are_not_facts_are_dead_lettered_with_the_reason_and_the_rest_written():
    b = batch()
    good = messages(b)
    junk = [("utilization", b"\x00\x00\x00\x00\x02\xff"), ("capacity", good[0][1][:-3]), ("pods", b"x"),
            ("demand", good[-1][1] + b"zz"), ("utilization", nan_value()), ("requests", b"")]
    msgs = good[:5] + junk[:3] + good[5:] + junk[3:]
    store, dead = RefusingStore(), Dead()
    sink = FactSink(store, dead)
    assert sink.write(msgs) == {"capacity": 3, "utilization": 16, "requests": 2, "demand": 2, "models": 0,
        "health": 0, "health_incidents": 0}
    assert stored(store) == expected(b)
    assert sink.undecodable == 6 and sink.refused == 0
    n = len(good)
    by_source = {s: (r, raw) for s, r, raw in dead}  # source: the kind and the index in the messages
    sources = ["utilization#5", "capacity#6", "pods#7", f"demand#{n + 3}", f"utilization#{n + 4}", f"requests#{n + 5}"]
    assert sorted(by_source) == sorted(sources) and len(dead) == 6
    assert [by_source[s][1] for s in sources] == [v for _, v in junk]
    assert all(r.startswith("FactCodecError: ") for _, r, _ in dead)
    reasons = [by_source[s][0] for s in sources]
    assert "undecodable body" in reasons[0] and "unknown fact kind 'pods'" in reasons[2]
    assert "trailing bytes" in reasons[3] and "'u99': power_w is nan" in reasons[4] and "too short" in reasons[5]


def test_a_row_the_store_refuses_for_good_is_dead_lettered_alone_as_it_came_in():
    b = batch()
    msgs = messages(b)
    raw = dict((f.fact_id, v) for f, (_, v) in zip([*b.capacity, *b.utilization, *b.requests, *b.demand], msgs))
    store, dead = RefusingStore(bad={"u7", "d1"}), Dead()
    sink = FactSink(store, dead)
    assert sink.write(msgs) == {"capacity": 3, "utilization": 15, "requests": 2, "demand": 1, "models": 0,
        "health": 0, "health_incidents": 0}
    assert stored(store) == expected(b, drop={"u7", "d1"})
    assert sorted(dead) == [
        ("demand:d1", "StoreRejected: demand_facts row d1: insert into gpuledger.demand_facts failed: "
                      "a value does not fit", raw["d1"]),
        ("gpuledger.source.dcgm/2@507", "StoreRejected: utilization_facts row u7: insert into "
                                        "gpuledger.utilization_facts failed: a value does not fit", raw["u7"])]
    assert sink.refused == 2 and sink.undecodable == 0
    assert store.writes < 1 + 2 * 16  # bisected, not written row by row


def test_refused_rows_and_undecodable_values_together_keep_raw_values_aligned():
    b = batch()
    good = messages(b)
    msgs = [("utilization", b"junk")] + good + [("utilization", b"\x00")]
    store, dead = RefusingStore(bad={"u3", "u15"}), Dead()
    assert FactSink(store, dead).write(msgs)["utilization"] == 14
    refused = {s: raw for s, r, raw in dead if r.startswith("StoreRejected")}
    assert refused == {"gpuledger.source.dcgm/2@503": encode_fact("utilization", b.utilization[3]),
                       "gpuledger.source.dcgm/2@515": encode_fact("utilization", b.utilization[15])}


def test_a_table_refused_whatever_the_rows_fails_the_write_and_drops_nothing():
    b = batch()
    store, dead = RefusingStore(table_gone=True), Dead()
    sink = FactSink(store, dead)
    with pytest.raises(PermanentStoreError, match="utilization_facts does not exist"):
        sink.write(messages(b))
    assert dead == [] and store.utilization == {}
    store.table_gone = False  # the table is back: the same messages again
    assert sink.write(messages(b))["utilization"] == 16
    assert stored(store) == expected(b) and dead == []


def test_a_store_that_is_down_fails_the_write_and_the_retry_writes_everything():
    b = batch()
    clock = [0.0]
    memory, dead = MemoryStore(), Dead()
    sink = FactSink(OutageStore(memory, 0.0, 5.0, lambda: clock[0]), dead)
    with pytest.raises(StoreError, match="injected outage") as info:
        sink.write(messages(b))
    assert info.value.transient and memory.utilization == {} and dead == []
    clock[0] = 10.0
    assert sink.write(messages(b)) == {"capacity": 3, "utilization": 16, "requests": 2, "demand": 2, "models": 0,
        "health": 0, "health_incidents": 0}
    assert stored(memory) == expected(b)


def test_a_request_event_contradicting_a_recorded_request_is_dead_lettered_not_written():
    store, dead, b = RefusingStore(), Dead(), batch()
    sink = FactSink(store, dead)
    sink.write(messages(b))
    original = b.requests[0]
    forged = dataclasses.replace(original, tenant_id="victim", output_tokens=original.output_tokens + 1_000_000,
                                 src_offset=original.src_offset + 500)
    again = dataclasses.replace(original, src_offset=original.src_offset + 900)  # resent, same content
    assert sink.write([("requests", encode_fact("requests", forged)), ("requests", encode_fact("requests", again))]) == {
        "capacity": 0, "utilization": 0, "requests": 1, "demand": 0, "models": 0,
        "health": 0, "health_incidents": 0}
    assert store.requests[original.fact_id] == original and sink.conflicts == 1
    ((source, reason, raw),) = dead
    assert source == f"{forged.src_topic}/{forged.src_partition}@{forged.src_offset}"
    assert reason.startswith("RequestConflict: ") and "tenant_id 'victim'" in reason and raw



def test_batch_records_store_the_facts_of_single_ones_and_a_broken_one_is_dead_lettered_whole():
    """A worker's batch records (streams/fact_batches.py), split by ``unbatch``, store exactly
    what the same facts as single values store; a value that is not a whole batch is
    dead-lettered once, whole, under its position, and nothing of it is written."""
    b = batch()
    singles = MemoryStore()
    FactSink(singles, lambda *d: None).write(messages(b))
    records = []  # (kind, value, batched) as a worker produces them
    emit_batched(b, {k: k for k in FACT_KINDS},
                 lambda topic, value, key, headers=None: records.append((topic, value, is_batch(headers))),
                 lambda: None, max_bytes=300)
    assert sum(1 for _k, _v, batched in records if batched) > 4
    dead = []
    store = MemoryStore()
    sink = FactSink(store, lambda src, reason, raw: dead.append((src, reason, raw)))
    pairs = []
    for i, (kind, value, batched) in enumerate(records):
        pairs += [(kind, v) for v in (sink.unbatch(kind, value, f"t/0@{i}") if batched else [value])]
    sink.write(pairs)
    assert stored(store) == stored(singles) and not dead
    broken = next(v for kind, v, batched in records if batched and kind == "utilization")[:-3]
    assert sink.unbatch("utilization", broken, "gpuledger.facts.utilization/3@77") == []
    ((src, reason, raw),) = dead
    assert src == "gpuledger.facts.utilization/3@77" and raw == broken
    assert reason.startswith("FactCodecError: utilization_fact_batch v1: not a whole batch of utilization_fact v2")
    assert sink.undecodable == 1


@pytest.mark.parametrize("bad", [frozenset(), {"u7", "d1"}])
def test_values_written_grouped_by_kind_are_written_as_their_pairs_are(bad):
    """``write_grouped`` (what the sink's loop hands over: each kind's values as a poll gathered
    them) stores, dead-letters, names and counts exactly as ``write`` of the same values paired
    kind after kind, with undecodable values, an unknown kind and refused rows among them, and
    leaves the lists as they were (a write retried after an outage reads them again)."""
    b = batch()
    good = messages(b)
    junk = [("utilization", b"\x00\x00\x00\x00\x02\xff"), ("capacity", good[0][1][:-3]), ("pods", b"x"),
            ("demand", good[-1][1] + b"zz"), ("utilization", nan_value()), ("requests", b"")]
    by_kind: dict[str, list[bytes]] = {}
    for kind, value in junk[:3] + good + junk[3:]:
        by_kind.setdefault(kind, []).append(value)
    before = {k: list(vs) for k, vs in by_kind.items()}
    runs = []
    for grouped in (True, False):
        store, dead = RefusingStore(bad=bad), Dead()
        sink = FactSink(store, dead)
        counts = sink.write_grouped(by_kind) if grouped else sink.write(
            [(k, v) for k, vs in by_kind.items() for v in vs])
        runs.append((counts, stored(store), list(dead), sink.undecodable, sink.refused, sink.stored_observed_ms))
    assert runs[0] == runs[1] and by_kind == before
    assert runs[0][0]["utilization"] == 16 - len(bad) // 2 and len(runs[0][2]) == 6 + len(bad)
    kinds = list(by_kind)
    pods_at = sum(len(by_kind[k]) for k in kinds[:kinds.index("pods")])  # its place in the values, kind after kind
    assert f"pods#{pods_at}" in {s for s, _, _ in runs[0][2]} and pods_at > 0


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("bad", [frozenset(), {"u7", "c1"}])
def test_batch_records_kept_whole_store_what_their_split_facts_store(bad, mixed):
    """A batch record the check passes whole (``gather``: a ``CheckedBatch``, copied once into
    the store's container) stores, dead-letters, names and counts exactly as its facts split
    into single values do, with rows the store refuses for good (the batch then takes the
    fact-by-fact path), a single value among a kind's batches, and a broken batch; the lists are
    left as they were."""
    b = batch()
    records = []
    emit_batched(b, {k: k for k in FACT_KINDS},
                 lambda topic, value, key, headers=None: records.append((topic, value, is_batch(headers))),
                 lambda: None, max_bytes=300)
    broken = next(v for kind, v, batched in records if batched and kind == "capacity")[:-2]
    records.insert(3, ("capacity", broken, True))
    if mixed:
        records.insert(5, ("utilization", encode_fact("utilization", util(99, "GPU-9")), False))
    runs, kept_whole = [], 0
    for whole in (True, False):
        store, dead = RefusingStore(bad=bad), Dead()
        sink = FactSink(store, dead)
        by_kind: dict[str, list] = {}
        added = 0
        for i, (kind, value, batched) in enumerate(records):
            values = by_kind.setdefault(kind, [])
            if not batched:
                values.append(value)
                added += 1
            elif whole:
                added += sink.gather(values, kind, value, f"t/0@{i}")
            else:
                split = sink.unbatch(kind, value, f"t/0@{i}")
                values += split
                added += len(split)
        kept_whole += sum(type(v) is fact_sink.CheckedBatch for vs in by_kind.values() for v in vs)
        before = {k: list(vs) for k, vs in by_kind.items()}
        counts = sink.write_grouped(by_kind)
        assert by_kind == before
        runs.append((added, counts, stored(store), list(dead), sink.undecodable, sink.refused, sink.stored_observed_ms))
    assert runs[0] == runs[1] and kept_whole > 4
    want = {f"u{i}" for i in range(16)} | ({"u99"} if mixed else set())
    assert runs[0][1]["utilization"] == len(want - bad) and runs[0][4] == 1 and runs[0][5] == len(bad)
    assert sorted(runs[0][2]["utilization"]) == sorted(want - bad) and len(runs[0][6]) >= len(want - bad)
