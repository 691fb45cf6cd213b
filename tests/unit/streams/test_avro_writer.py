"""The compiled fact writer writes fastavro's bytes for every fact kind, whatever the values,
and hands anything it is not sure of to the general path."""

import dataclasses
import io
import math
import random
import typing

import fastavro
import pytest

from avro_cases import CHECKERS, WRITERS, checker, compiled, writer
from avro_cases import random_fact as _random_fact
from gpuledger.streams.avro_writer import NotFast, compile_writer
from gpuledger.streams.fact_codec import _CODECS, FACT_CLASSES, FACT_KINDS, FactCodecError, decode_facts, encode_fact


def _fastavro(kind: str, fact) -> bytes:
    codec = _CODECS[kind]
    buf = io.BytesIO()
    buf.write(codec.header)
    fastavro.schemaless_writer(buf, codec.schema, fact.__dict__)
    return buf.getvalue()


@pytest.mark.parametrize("impl", WRITERS)
@pytest.mark.parametrize("kind", FACT_KINDS)
def test_the_compiled_writer_writes_fastavros_bytes(kind, impl):
    codec = _CODECS[kind]
    assert codec.fast is not None, f"{kind}: every fact schema is flat, so it gets a compiled writer"
    assert codec.c_write is not None, f"{kind}: and one in C"
    write = writer(kind, impl)
    rng = random.Random(hash(kind) & 0xFFFF)
    for _ in range(400):
        fact = _random_fact(kind, rng)
        written = write(fact.__dict__)
        assert written == _fastavro(kind, fact), fact
        assert decode_facts(kind, [written]) == [fact]


@pytest.mark.parametrize("kind", FACT_KINDS)
def test_the_c_writer_looks_fields_up_by_the_dataclass_s_own_names(kind):
    """The C writer's field names are the very objects a fact's dict is keyed by (interned), so
    that each lookup matches by identity instead of comparing the strings."""
    codec = _CODECS[kind]
    names = codec.c_write.args[2]
    keys = {k: k for k in _random_fact(kind, random.Random(7)).__dict__}
    assert [n for n in names if keys[n] is not n] == []


@pytest.mark.parametrize("field,bad", [("power_w", math.nan), ("power_w", math.inf), ("sm_active_ratio", -math.inf),
                                       ("power_w", "600"), ("observed_at_ms", True), ("observed_at_ms", "7"),
                                       ("observed_at_ms", 2 ** 63), ("src_offset", -(2 ** 63) - 1),
                                       ("src_partition", 2 ** 31), ("observed_at_ms", 1.5), ("fb_used_bytes", 2.0),
                                       ("fact_id", b"bytes"), ("observed_at_ms", None), ("src_partition", -(2 ** 31) - 1)])
@pytest.mark.parametrize("impl", WRITERS)
def test_what_it_is_not_sure_of_goes_to_the_general_path(field, bad, impl):
    kind = "utilization"
    fact = _random_fact(kind, random.Random(1))
    with pytest.raises(NotFast):
        writer(kind, impl)({**fact.__dict__, field: bad})
    with pytest.raises(FactCodecError, match=field):  # the general path names the field
        encode_fact(kind, dataclasses.replace(fact, **{field: bad}))


@pytest.mark.parametrize("impl", WRITERS)
def test_an_integer_past_a_doubles_range_is_not_written(impl):
    fact = _random_fact("utilization", random.Random(1))
    with pytest.raises((NotFast, OverflowError)):
        writer("utilization", impl)({**fact.__dict__, "power_w": 10 ** 400})


@pytest.mark.parametrize("impl", WRITERS)
def test_a_string_that_is_not_utf8_encodable_goes_to_the_general_path(impl):
    fact = _random_fact("utilization", random.Random(2))
    with pytest.raises(NotFast):
        writer("utilization", impl)({**fact.__dict__, "pod_name": "lone \ud800 surrogate"})
    with pytest.raises(FactCodecError, match="pod_name"):
        encode_fact("utilization", dataclasses.replace(fact, pod_name="lone \ud800 surrogate"))


def test_a_schema_beyond_flat_primitives_gets_no_compiled_writer():
    for t in ({"type": "array", "items": "long"}, ["null", "string", "long"], "boolean", "bytes"):
        schema = fastavro.parse_schema({"type": "record", "name": "X", "fields": [{"name": "a", "type": t}]})
        assert compile_writer(schema, b"") is None, t


def test_every_fact_class_is_covered():
    assert set(FACT_CLASSES) == set(FACT_KINDS)
    assert all(typing.get_type_hints(cls) for cls in FACT_CLASSES.values())


@pytest.mark.parametrize("impl", CHECKERS)
@pytest.mark.parametrize("kind", FACT_KINDS)
def test_the_checker_takes_every_fact_the_writer_writes(kind, impl):
    assert _CODECS[kind].checker is not None and _CODECS[kind].program is not None
    check = checker(kind, impl)
    rng = random.Random(7 + len(kind))
    facts = [_random_fact(kind, rng) for _ in range(300)]
    kept = [check(encode_fact(kind, f)) for f in facts]
    assert kept == [f.observed_at_ms if kind == "utilization" else None for f in facts]


def _plain(kind: str, fact, **change) -> bytes:
    """Framed like the codec, written by plain fastavro (which lets NaN and the like through)."""
    codec = _CODECS[kind]
    buf = io.BytesIO()
    buf.write(codec.header)
    fastavro.schemaless_writer(buf, codec.schema, {**fact.__dict__, **change})
    return buf.getvalue()


@pytest.mark.parametrize("impl", CHECKERS)
def test_the_checker_refuses_what_decoding_refuses(impl):
    kind = "utilization"
    check = checker(kind, impl)
    fact = replace_nulls(_random_fact(kind, random.Random(3)))
    good = encode_fact(kind, fact)
    bad_utf8 = good.replace(fact.pod_name.encode(), b"\xff" * len(fact.pod_name.encode()), 1)
    cases = {"truncated": good[:-1], "trailing byte": good + b"\x00", "NaN": _plain(kind, fact, power_w=math.nan),
             "infinity": _plain(kind, fact, sm_active_ratio=math.inf), "bad UTF-8": bad_utf8,
             "other version": b"\x00\x00\x00\x00\x01" + good[5:], "bad union branch": _branch(good, fact),
             "empty": b"", "header only": good[:5]}
    for name, raw in cases.items():
        with pytest.raises(Exception):  # noqa: B017,PT011 — any refusal sends the batch down the general path
            check(raw)
        errors = []
        decode_facts(kind, [raw], lambda *e: errors.append(e))
        assert errors, f"{name}: decoding refuses it too"


def replace_nulls(fact):
    """Every nullable number set (so the cases above have a value to spoil)."""
    return dataclasses.replace(fact, sm_active_ratio=0.5, fb_used_bytes=1 << 30, power_w=300.0, energy_j=12.5,
                               pod_name="train-0")


def _branch(good: bytes, fact) -> bytes:
    """The union branch of sm_active_ratio (after the first six fields) set to 4: no such branch."""
    p = 5
    for _ in range(5):  # fact_id, cluster_id, gpu_uuid, device_id, node: strings
        n = good[p] >> 1
        p += 1 + n
    while good[p] & 0x80:  # observed_at_ms, span_ms: varints
        p += 1
    p += 1
    while good[p] & 0x80:
        p += 1
    p += 1
    assert good[p] == 2  # sm_active_ratio: the double branch
    return good[:p] + b"\x04" + good[p + 1:]


@pytest.mark.parametrize("impl", CHECKERS)
def test_the_checker_refuses_bad_utf8_wherever_it_sits_in_a_run_of_strings(impl):
    """Strings are checked in runs: a sequence cut at a string's end, a stray continuation byte
    at a string's start, and a bad byte in a string too long for a one-byte length are each
    refused, as decoding refuses them."""
    kind = "utilization"
    check = checker(kind, impl)
    base = replace_nulls(_random_fact(kind, random.Random(5)))
    base = dataclasses.replace(base, **{f.name: "x" for f in dataclasses.fields(base) if isinstance(getattr(base, f.name), str)})
    cases = {"cut sequence then next string": dict(cluster_id="aé", node="x"),
             "continuation byte first": dict(node="é"),
             "long string": dict(reason="r" * 100 + "é" + "s" * 50),
             "string before the integers": dict(src_topic="t" * 70 + "é")}
    for name, change in cases.items():
        fact = dataclasses.replace(base, **change)
        good = encode_fact(kind, fact)
        assert check(good) == fact.observed_at_ms, name
        if name == "cut sequence then next string":  # "aé" is 61 c3 a9: the string now ends on a lead byte
            bad = good.replace(b"\x06a\xc3\xa9", b"\x06aa\xc3", 1)
        elif name == "continuation byte first":
            bad = good.replace(b"\xc3\xa9", b"\xa9\xa9", 1)
        else:
            bad = good.replace(b"\xc3\xa9", b"\xc3(", 1)
        assert bad != good and len(bad) == len(good), name
        with pytest.raises(UnicodeDecodeError if impl == "python" else NotFast):
            check(bad)
        errors = []
        decode_facts(kind, [bad], lambda *e: errors.append(e))
        assert errors, f"{name}: decoding refuses it too"


@pytest.mark.parametrize("impl", CHECKERS)
def test_whatever_the_checker_takes_decoding_takes(impl):
    """Random corruption of fact bodies: any value the checker passes is a fact that decoding
    takes, with the same kept value (the sink hands the checked bytes to ClickHouse, so it must
    never pass what the fact-by-fact path would refuse)."""
    rng = random.Random(11)
    passed = refused = 0
    for kind in ("capacity", "utilization", "health"):
        check = checker(kind, impl)
        for _ in range(300):
            fact = _random_fact(kind, rng)
            raw = bytearray(encode_fact(kind, fact))
            for _ in range(rng.choice([1, 1, 2, 3])):
                i = rng.randrange(5, len(raw))
                raw[i] = rng.choice([rng.randrange(256), raw[i] ^ 0x80, raw[i] ^ 0x01, 0x80, 0xFF, 0x00])
            raw = bytes(raw)
            try:
                kept = check(raw)
            except Exception:  # noqa: BLE001 — refused: the general path decides
                refused += 1
                continue
            passed += 1
            facts = decode_facts(kind, [raw])  # raises if decoding refuses it
            assert kept == (facts[0].observed_at_ms if kind == "utilization" else None)
    assert passed > 50 and refused > 50, (passed, refused)


@pytest.mark.parametrize("impl", CHECKERS)
@pytest.mark.parametrize(("kind", "field", "varint", "ok"), [
    ("utilization", "src_partition", b"\xff\xff\xff\xff\x0f", True),  # -2**31: the fifth byte below 16
    ("utilization", "src_partition", b"\xfe\xff\xff\xff\x1f", False),  # 2**32 once zigzagged: not an int
    ("utilization", "src_offset", b"\xff" * 9 + b"\x01", True),  # -2**63
    ("utilization", "src_offset", b"\xff" * 9 + b"\x02", False),  # past 64 bits
    ("utilization", "src_offset", b"\xff" * 10 + b"\x00", False),  # an eleventh byte
])
def test_the_checker_takes_integers_at_their_types_edges_and_nothing_past(kind, field, varint, ok, impl):
    check = checker(kind, impl)
    fact = dataclasses.replace(replace_nulls(_random_fact(kind, random.Random(2))), src_partition=5, src_offset=77)
    good = encode_fact(kind, fact)
    old = {"src_partition": b"\x0a\x9a\x01", "src_offset": b"\x9a\x01"}[field]  # partition 5 then offset 77
    assert good.endswith(b"\x0a\x9a\x01")
    bad = good[:-len(old)] + (varint + b"\x9a\x01" if field == "src_partition" else varint)
    if ok:
        check(bad)
        assert encode_fact(kind, decode_facts(kind, [bad])[0]) == bad
    else:
        with pytest.raises(Exception):  # noqa: B017,PT011
            check(bad)


@pytest.mark.parametrize("impl", CHECKERS)
def test_a_record_that_ends_in_strings_has_its_last_run_checked(impl):
    schema = {"type": "record", "name": "T", "fields": [{"name": "n", "type": "long"},
                                                         {"name": "a", "type": "string"},
                                                         {"name": "b", "type": ["null", "string"]}]}
    check = compiled(schema, b"H", "", impl)
    assert check is not None
    good = b"H" + b"\x02" + b"\x02x" + b"\x02" + b"\x04\xc3\xa9"  # n=1, a="x", b="é"
    assert check(good) is None
    for bad in (b"H\x02\x02x\x02\x04\xc3(", b"H\x02\x02\xc3\x02\x04\xc3\xa9"):
        with pytest.raises(UnicodeDecodeError if impl == "python" else NotFast):
            check(bad)
