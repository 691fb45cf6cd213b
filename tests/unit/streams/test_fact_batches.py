"""Batch records of the bulk kinds (streams/fact_batches.py): what a worker emits splits back
into exactly the single facts ``iter_encoded`` gives, in order, whatever the batch size, the
hostile facts and a full queue; the batch is real Avro of its schema; and a value that is not a
whole batch is refused whole, by the C split and the Python one alike."""

import io
import json
import random

import fastavro
import pytest

from avro_cases import Queue, random_batch, random_fact
from gpuledger.domain.facts import FactBatch
from gpuledger.schemas.registry import AVRO_DIR, latest_version, load_schema, versions
from gpuledger.streams import fact_batches
from gpuledger.streams.fact_batches import (BATCH_HEADER, BATCH_HEADERS, batch_schema_name, emit_batched, is_batch,
                                            split_batch)
from gpuledger.streams.fact_codec import _CODECS, BULK_KINDS, FACT_KINDS, FactCodecError, decode_facts, iter_encoded

TOPICS = {kind: f"facts.{kind}" for kind in FACT_KINDS}


def _singles(queue: Queue) -> list[tuple[str, bytes]]:
    """Every fact the queue took, batches split: (topic, framed single value)."""
    out = []
    for (topic, value, _key), headers in zip(queue.sent, queue.headers):
        kind = topic.split(".", 1)[1]
        if is_batch(headers):
            out += [(topic, v) for v in split_batch(kind, value)]
        else:
            assert kind not in BULK_KINDS and headers is None
            out.append((topic, value))
    return out


@pytest.mark.parametrize("max_bytes,full_every", [(1, 0), (700, 3), (4096, 1), (262_144, 0)])
def test_the_batches_split_into_what_iter_encoded_gives(max_bytes, full_every):
    rng = random.Random(max_bytes + full_every)
    total = batched_records = hostile_seen = 0
    for _ in range(40):
        batch = random_batch(rng, hostile=rng.choice((0.0, 0.05, 0.3)))
        want_errors, got_errors = [], []
        want = [(TOPICS[k], v) for k, _key, v in
                iter_encoded(batch, lambda kind, f, exc: want_errors.append((kind, id(f), str(exc))))]
        queue = Queue(full_every)
        emitted = emit_batched(batch, TOPICS, queue.produce, queue.on_full,
                               lambda kind, f, exc: got_errors.append((kind, id(f), str(exc))), max_bytes)
        got = _singles(queue)
        for kind in FACT_KINDS:  # per topic, the same values in the same order
            assert [v for t, v in got if t == TOPICS[kind]] == [v for t, v in want if t == TOPICS[kind]], kind
        assert emitted == len(got) == len(want)
        assert sorted(got_errors) == sorted(want_errors)
        assert queue.waits == queue.calls - len(queue.sent)  # every refusal waited out, none lost
        for (topic, value, key), headers in zip(queue.sent, queue.headers):
            if is_batch(headers):
                batched_records += 1
                first = split_batch(topic.split(".", 1)[1], value)[0]
                assert key == decode_facts(topic.split(".", 1)[1], [first])[0].fact_id.encode()
        total += len(want)
        hostile_seen += len(want_errors)
    assert total > 1500 and hostile_seen > 20 and batched_records > 20


def test_a_batch_holds_facts_up_to_its_size_and_one_past_it():
    rng = random.Random(5)
    facts = [random_fact("utilization", rng) for _ in range(500)]
    queue = Queue()
    assert emit_batched(FactBatch(utilization=facts), TOPICS, queue.produce, queue.on_full, max_bytes=10_000) == 500
    sizes = [len(split_batch("utilization", v)) for _t, v, _k in queue.sent]
    assert len(sizes) > 5 and sum(sizes) == 500
    for _t, value, _k in queue.sent[:-1]:
        items = split_batch("utilization", value)
        body = sum(len(v) - 5 for v in items)
        assert body >= 10_000 and body - (len(items[-1]) - 5) < 10_000
    assert all(h == BATCH_HEADERS for h in queue.headers)


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_a_batch_is_avro_of_its_schema_and_its_items_are_the_facts(kind):
    rng = random.Random(len(kind))
    facts = [random_fact(kind, rng) for _ in range(30)]
    queue = Queue()
    emit_batched(FactBatch(**{kind: facts}), TOPICS, queue.produce, queue.on_full)
    ((_topic, value, _key),) = queue.sent
    name = batch_schema_name(kind)
    schema = load_schema(name, latest_version(name))
    buf = io.BytesIO(value)
    buf.seek(5)
    record = fastavro.schemaless_reader(buf, schema, None)  # what any Avro reader of the schema reads
    assert buf.tell() == len(value)
    assert decode_facts(kind, split_batch(kind, value)) == facts
    assert [r["fact_id"] for r in record["facts"]] == [f.fact_id for f in facts]


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_each_batch_schema_carries_the_fact_schema_it_names(kind):
    name = batch_schema_name(kind)
    fact = _CODECS[kind].name
    raw = lambda n, v: json.loads((AVRO_DIR / f"{n}.v{v}.avsc").read_text())  # noqa: E731 — as written
    for v in versions(name):
        schema = raw(name, v)
        assert schema["fields"][0]["type"]["items"] == raw(fact, schema["fact_version"])
    assert load_schema(name, latest_version(name))["fact_version"] == latest_version(fact)  # workers write it


def _spoiled(value: bytes, rng: random.Random) -> bytes:
    b = bytearray(value)
    how = rng.randrange(5)
    if how == 0:
        del b[rng.randrange(5, len(b)):]  # cut
    elif how == 1:
        b += bytes([rng.randrange(256)])  # bytes after the array
    elif how == 2:
        i = rng.randrange(5, len(b))
        b[i] ^= 1 << rng.randrange(8)  # a flipped bit
    elif how == 3:
        i = rng.randrange(5, len(b))
        b[i:i] = bytes([rng.randrange(256)])  # an inserted byte
    else:
        b[5] = 0xFE  # a count that no array holds
    return bytes(b)


def test_a_value_that_is_not_a_whole_batch_is_refused_whole_by_both_splits(monkeypatch):
    """The C split and the Python one (a source tree without the build) refuse the same values;
    what either accepts decodes into facts or is refused fact by fact as a single value would be.
    The sink's check without a split (``checked_batch``) keeps whole exactly what they accept."""
    from gpuledger.streams.fact_batches import checked_batch

    rng = random.Random(99)
    refused = accepted = 0
    for _ in range(400):
        kind = rng.choice(BULK_KINDS)
        queue = Queue()
        emit_batched(FactBatch(**{kind: [random_fact(kind, rng) for _ in range(rng.randrange(1, 6))]}), TOPICS,
                     queue.produce, queue.on_full)
        value = _spoiled(queue.sent[0][1], rng)
        try:
            c = split_batch(kind, value)
        except FactCodecError:
            c = None
        with monkeypatch.context() as m:
            m.setattr(fact_batches, "_split_batch", None)
            try:
                py = split_batch(kind, value)
            except FactCodecError:
                py = None
        checked = checked_batch(kind, value)
        assert (c is None) == (py is None) == (checked is None), (kind, value)
        if c is None:
            refused += 1
        else:
            accepted += 1
            assert c == py and checked[0] == len(c)
    assert refused > 200 and accepted > 5


def test_what_is_not_a_batch_names_the_schema_and_the_fix():
    with pytest.raises(FactCodecError, match="too short"):
        split_batch("utilization", b"\x00\x00")
    with pytest.raises(FactCodecError, match="bad magic"):
        split_batch("utilization", b"\x01\x00\x00\x00\x01\x00")
    with pytest.raises(FactCodecError, match="unknown schema version 99"):
        split_batch("capacity", b"\x00\x00\x00\x00\x63\x00")
    with pytest.raises(FactCodecError, match="not batched"):
        split_batch("requests", b"\x00\x00\x00\x00\x01\x00")
    assert split_batch("health", b"\x00\x00\x00\x00\x01\x00") == []  # an empty array is a batch of none
    assert is_batch([BATCH_HEADER]) and is_batch([("x", b"y"), BATCH_HEADER])
    assert not is_batch(None) and not is_batch([]) and not is_batch([("gpuledger-batch", b"0")])


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_a_container_of_framed_values_holds_their_bodies(kind, monkeypatch):
    """The sink hands the store each bulk kind's framed values in one Avro container file
    (``container``, each body copied once in C): the same bytes as the Python join's, for none,
    one and many facts; fastavro reads back every fact's body in order."""
    from gpuledger.streams import fact_codec
    from gpuledger.streams.fact_codec import _HEADER, container, encode_fact

    rng = random.Random(len(kind))
    for n in (0, 1, 2, 37):
        values = [encode_fact(kind, random_fact(kind, rng)) for _ in range(n)]
        in_c = container(kind, values)
        with monkeypatch.context() as m:
            m.setattr(fact_codec, "_container", None)
            assert container(kind, values) == in_c
            assert container(kind, [bytearray(v) for v in values]) == in_c  # (not bytes: the join)
        assert fact_codec._container(b"h", [*values, "not bytes"], 5, b"s") is None
        assert fact_codec._container(b"h", [b"1234"], 5, b"s") is None  # shorter than its framing
        read = list(fastavro.reader(io.BytesIO(in_c)))
        assert len(read) == n and read == [
            fastavro.schemaless_reader(io.BytesIO(v[_HEADER.size:]), _CODECS[kind].schema, None) for v in values]


def _blocks(kind: str, bodies: list[bytes], sizes: list[int], sized: bool) -> bytes:
    """A batch record of ``kind`` whose array is written in blocks of ``sizes`` items, each with
    a negative count and its byte size when ``sized`` (as Avro allows; workers write one block)."""
    from gpuledger.streams.avro_writer import varint
    from gpuledger.streams.fact_codec import _HEADER

    out, at = [_HEADER.pack(0, latest_version(batch_schema_name(kind)))], 0
    for n in sizes:
        items = b"".join(bodies[at:at + n])
        out += [varint(-n), varint(len(items)), items] if sized else [varint(n), items]
        at += n
    return b"".join([*out, b"\x00"])


@pytest.mark.parametrize("kind", BULK_KINDS)
def test_a_checked_batch_is_its_split_without_a_copy(kind, monkeypatch):
    """``checked_batch`` gives what the sink needs of a batch record without splitting it (the
    facts' count, their observed_at_ms as ``checked_kept`` reads them from the split values),
    and ``batch_container`` over its spans is the container of its split values: the very
    bytes for a one-block array, the same facts for many records and blocks, in C and in Python."""
    from gpuledger.streams import fact_codec
    from gpuledger.streams.fact_batches import batch_container, checked_batch
    from gpuledger.streams.fact_codec import _HEADER, checked_kept, container, encode_fact

    rng = random.Random(7 + len(kind))
    records, singles = [], []
    for max_bytes in (1, 300, 5_000, 262_144):
        queue = Queue()
        emit_batched(FactBatch(**{kind: [random_fact(kind, rng) for _ in range(rng.randrange(1, 40))]}), TOPICS,
                     queue.produce, queue.on_full, max_bytes=max_bytes)
        for _topic, value, _key in queue.sent:
            split = split_batch(kind, value)
            count, kept, spans = checked_batch(kind, value)
            assert (count, kept) == (len(split), checked_kept(kind, split) if kind == "utilization" else None)
            assert len(spans) == 1 and batch_container(kind, [(value, spans)]) == container(kind, split)
            records.append((value, spans))
            singles += split
    bodies = [encode_fact(kind, random_fact(kind, rng))[_HEADER.size:] for _ in range(9)]
    for sizes, sized in (([2, 3, 4], True), ([1, 8], False), ([9], True)):
        value = _blocks(kind, bodies, sizes, sized)
        split = split_batch(kind, value)
        count, kept, spans = checked_batch(kind, value)
        assert (count, kept, [s[0] for s in spans]) == (9, checked_kept(kind, split) if kind == "utilization" else
                                                        None, sizes)
        records.append((value, spans))
        singles += split
    whole = batch_container(kind, records)
    with monkeypatch.context() as m:
        m.setattr(fact_batches, "_batch_container", None)
        assert batch_container(kind, records) == whole
    read = list(fastavro.reader(io.BytesIO(whole)))
    assert len(read) == len(singles) > 100 and read == list(fastavro.reader(io.BytesIO(container(kind, singles))))
    c = fact_batches._batch_container
    head = fact_codec.ocf_header(kind)
    value, spans = records[0]
    assert c(head, [(value, ((1, 5, len(value) + 1),))], b"s") is None  # a span past its value
    assert c(head, [(value, ((0, 5, 6),))], b"s") is None and c(head, [(value,)], b"s") is None
    assert c(head, [(bytearray(value), spans)], b"s") is None and c(head, [(value, [spans[0]])], b"s") is None


def test_the_check_leaves_to_the_split_a_batch_of_another_version_and_every_batch_without_c(monkeypatch):
    """``checked_batch`` leaves to ``split_batch`` a batch of facts of another version than the
    latest (then decoded fact by fact), and every batch when the C module is not built."""
    from gpuledger.streams.fact_batches import checked_batch

    rng = random.Random(5)
    queue = Queue()
    emit_batched(FactBatch(utilization=[random_fact("utilization", rng)]), TOPICS, queue.produce, queue.on_full)
    value = queue.sent[0][1]
    assert checked_batch("utilization", value) is not None
    with monkeypatch.context() as m:  # a batch of facts of another version than the latest: split, then decoded
        m.setattr(_CODECS["utilization"], "version", _CODECS["utilization"].version + 1)
        assert checked_batch("utilization", value) is None
    with monkeypatch.context() as m:
        m.setattr(fact_batches, "_check_batch", None)
        assert checked_batch("utilization", value) is None
