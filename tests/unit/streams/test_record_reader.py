"""A worker's source reader (streams/record_reader.py, its C half streams/_avro_read.c ``read``)
gives, for every value, what ``Codec.decode`` gives: the same record (keys, order, values and
their types) or the same error. Over generated records of every flat source schema (hostile
strings, integers at their types' edges, NaN and infinite doubles, nulls) and over broken
values (truncated, bytes after the record, over-long and out-of-range varints, strings that
are not UTF-8, another framing, another version), and the C half reads nearly all the whole
ones itself."""

from __future__ import annotations

import io
import math
import random
import re
import struct

import fastavro
import pytest

from gpuledger.schemas.registry import Codec, load_schema, versions
from gpuledger.streams.record_reader import RecordReader, _read

SOURCES = ["dcgm_scrape", "podresources_snapshot", "request_event", "model_scrape", "k8s_watch_event",
           "reference_document", "vgpu_snapshot"]
STRINGS = ["", "node-1", "é", "\u2028", "\x00", "日本語", "\U0001F600", "a" * 3000, "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1\n"]
LONGS = [0, 1, -1, 63, 64, -65, 2**31 - 1, -2**31, 2**31, 2**53 + 1, 2**63 - 1, -2**63, 1_764_000_000_000]
DOUBLES = [0.0, -0.0, 1.5, 1e308, 5e-324, float("nan"), float("inf"), -float("inf")]


def _value(rng: random.Random, t):
    if isinstance(t, list):
        branch = rng.choice(t)
        return None if branch == "null" else _value(rng, branch)
    if t == "string":
        return rng.choice(STRINGS) + (rng.choice(STRINGS) if rng.random() < 0.3 else "")
    if t == "long":
        return rng.choice(LONGS)
    if t == "int":
        return rng.choice([v for v in LONGS if -2**31 <= v < 2**31])
    if t == "double":
        return rng.choice(DOUBLES)
    if t == "boolean":
        return rng.random() < 0.5
    if isinstance(t, dict) and t.get("type") == "array":
        return [_value(rng, t["items"]) for _ in range(rng.randrange(3))]
    if isinstance(t, dict) and t.get("type") == "record" or isinstance(t, dict) and "fields" in t:
        return {f["name"]: _value(rng, f["type"]) for f in t["fields"]}
    if isinstance(t, dict) and t.get("type") == "map":
        return {rng.choice(STRINGS): _value(rng, t["values"]) for _ in range(rng.randrange(3))}
    if isinstance(t, dict) and t.get("type") in ("string", "long", "int", "double", "boolean"):
        return _value(rng, t["type"])
    raise AssertionError(f"a type the generator does not know: {t!r}")


def _encoded(schema: dict, version: int, record: dict) -> bytes:
    buf = io.BytesIO()
    buf.write(struct.pack(">BI", 0, version))
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


def _outcome(codec: Codec, value: bytes) -> tuple:
    try:
        record = codec.decode(value)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, re.sub(r" at 0x[0-9a-f]+", "", str(exc)))  # fastavro names its stream
    return ("read", list(record), [(type(v), repr(v)) for v in record.values()])


def _same(name: str, value: bytes) -> tuple:
    ours, theirs = _outcome(RecordReader(name), value), _outcome(Codec(name), value)
    assert ours == theirs, (name, value[:80])
    return ours


@pytest.mark.parametrize("name", SOURCES)
def test_generated_records_read_as_fastavro_reads_them(name: str) -> None:
    reader, rng = RecordReader(name), random.Random(name)
    fast = 0
    for _ in range(400):
        record = _value(rng, reader.schema)
        value = _encoded(reader.schema, reader.version, record)
        assert _same(name, value)[0] == "read"
        if reader.fast is not None:
            fast += _read(*reader.fast, value) is not None
    if name == "vgpu_snapshot":  # arrays of records: fastavro's alone
        assert reader.fast is None
    else:
        assert fast > 350, fast  # the C half reads them (integers beyond an int's range excepted)


def _broken(rng: random.Random, value: bytes) -> bytes:
    cut = rng.randrange(len(value) + 1)
    choice = rng.randrange(7)
    if choice == 0:
        return value[:cut]  # truncated
    if choice == 1:
        return value + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))  # bytes after it
    if choice == 2:
        return value[:cut] + bytes([rng.randrange(256)]) + value[cut + 1:]  # a byte changed
    if choice == 3:
        return value[:cut] + b"\xff" * rng.randrange(1, 12) + value[cut:]  # an over-long varint
    if choice == 4:
        return value[:cut] + b"\xed\xa0\x80" + value[cut:]  # a surrogate in UTF-8
    if choice == 5:
        return bytes([1]) + value[1:]  # another magic byte
    return value[:1] + struct.pack(">I", 999) + value[5:]  # a version no schema has


@pytest.mark.parametrize("name", SOURCES[:6])
def test_broken_values_give_what_fastavro_gives(name: str) -> None:
    reader, rng = RecordReader(name), random.Random(7 + len(name))
    kinds = set()
    for _ in range(1500):
        value = _broken(rng, _encoded(reader.schema, reader.version, _value(rng, reader.schema)))
        kinds.add(_same(name, value)[0])
    for value in (b"", b"\x00", b"\x00\x00\x00\x00"):
        kinds.add(_same(name, value)[0])
    assert kinds == {"read", "raises"}


def test_integers_at_and_past_their_types_edges() -> None:
    reader = RecordReader("dcgm_scrape")
    header = reader.fast[0]
    tail = b"\x02c\x02n\x02x"  # cluster_id, node, exposition of one character each
    for body in (b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
                 b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x02", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00",
                 b"\x80\x00", b"\x81\x00"):
        _same("dcgm_scrape", header + body + b"\x00" + tail)
    value = header + b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00" + tail
    assert reader.decode(value)["observed_at_ms"] == 2**63 - 1
    assert _read(*reader.fast, header + b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x02\x00" + tail) is None  # past 64 bits
    requests = RecordReader("request_event")
    doubles = [f["name"] for f in requests.schema["fields"] if "double" in f["type"]]
    record = {**_value(random.Random(1), requests.schema), **dict.fromkeys(doubles, float("nan"))}
    read = requests.decode(_encoded(requests.schema, requests.version, record))
    assert doubles and all(math.isnan(read[d]) for d in doubles)


def test_older_versions_are_fastavros_to_resolve() -> None:
    for name in SOURCES:
        if len(versions(name)) > 1:
            reader = RecordReader(name)
            old = versions(name)[0]
            record = _value(random.Random(3), load_schema(name, old))
            value = _encoded(load_schema(name, old), old, record)
            assert _read(*reader.fast, value) is None if reader.fast else True
            _same(name, value)
