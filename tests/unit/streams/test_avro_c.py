"""The C writer and check of facts (streams/_avro_write.c, streams/_avro_c.c) against their Python references
(streams/avro_writer.py), value by value on spoiled and hostile inputs."""

import dataclasses
import math
import random

import pytest

from avro_cases import checker, writer
from avro_cases import random_fact as _random_fact
from gpuledger.streams import _avro_c
from gpuledger.streams.avro_writer import check_program, compile_writer
from gpuledger.streams.fact_codec import _CODECS, FACT_KINDS, encode_fact


def _answer(check, raw: bytes):
    try:
        return ("takes", check(raw))
    except Exception:  # noqa: BLE001 — refused, however
        return ("refuses", None)


_HOSTILE_UTF8 = [b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98\x80", b"\xe2\x82", b"\x00",
                 b"\xc3\xa9", b"\xef\xbf\xbf", b"\xf8\x88\x80\x80\x80"]


def test_the_two_checkers_agree_on_corrupted_values():
    """Value by value, on facts of every kind spoiled every way (bytes flipped, cut, added,
    dropped; hostile UTF-8 spliced into strings; varints stretched): the C check takes
    exactly what the Python one takes, with the same kept value."""
    rng = random.Random(23)
    seen = {"takes": 0, "refuses": 0}
    for kind in FACT_KINDS:
        py, c = checker(kind, "python"), checker(kind, "c")
        for _ in range(400):
            fact = _random_fact(kind, rng)
            if kind == "utilization" and rng.random() < 0.3:
                fact = dataclasses.replace(fact, observed_at_ms=rng.choice([-(2 ** 63), 2 ** 63 - 1, -1, 0]))
            raw = bytearray(encode_fact(kind, fact))
            how = rng.randrange(6)
            if how == 0:
                for _ in range(rng.choice([1, 2])):
                    i = rng.randrange(len(raw))
                    raw[i] = rng.choice([rng.randrange(256), raw[i] ^ 0x80, raw[i] ^ 0x01, 0x80, 0xFF, 0x00])
            elif how == 1:
                del raw[rng.randrange(len(raw)):]
            elif how == 2:
                raw += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
            elif how == 3:
                i = rng.randrange(5, len(raw))
                raw[i:i] = rng.choice([b"\x80", b"\xff" * 9 + b"\x01", b"\x00", bytes([rng.randrange(256)])])
            elif how == 4:
                text = rng.choice(_HOSTILE_UTF8)
                i = raw.find(b"x", 5)  # inside a string (fact ids are hex, names hold x's), kept the same length
                if i > 0:
                    raw[i:i + 1] = text[:1] if rng.random() < 0.5 else text[-1:]
            raw = bytes(raw)
            a, b = _answer(py, raw), _answer(c, raw)
            assert a == b, (kind, how, raw)
            seen[a[0]] += 1
    assert seen["takes"] > 300 and seen["refuses"] > 800, seen


def test_the_two_checkers_agree_on_hostile_utf8_at_every_place_in_a_string():
    """The C check reads ASCII eight bytes a step: a byte of hostile or valid UTF-8 before,
    across and after each such step is judged as the Python check judges it."""
    rng = random.Random(31)
    py, c = checker("utilization", "python"), checker("utilization", "c")
    seen = {"takes": 0, "refuses": 0}
    for text in _HOSTILE_UTF8:
        for before in range(0, 19):
            placeholder = "a" * before + "\x7f" * len(text) + "b" * rng.randrange(0, 10)
            raw = b""
            while raw.count(b"\x7f" * len(text)) != 1:  # (random facts may hold the placeholder's byte elsewhere)
                raw = encode_fact("utilization", dataclasses.replace(_random_fact("utilization", rng),
                                                                     tenant_id=placeholder))
            raw = raw.replace(b"\x7f" * len(text), text)
            a, b = _answer(py, raw), _answer(c, raw)
            assert a == b, (text, before)
            seen[a[0]] += 1
    assert seen["takes"] >= 3 * 19 and seen["refuses"] >= 5 * 19, seen


def test_the_c_check_answers_for_the_whole_list():
    codec = _CODECS["utilization"]
    program, keep = codec.program
    rng = random.Random(4)
    facts = [_random_fact("utilization", rng) for _ in range(50)]
    values = [encode_fact("utilization", f) for f in facts]
    assert _avro_c.check_all(codec.header, program, keep, values) == [f.observed_at_ms for f in facts]
    assert _avro_c.check_all(codec.header, program, keep, []) == []
    assert _avro_c.check_all(codec.header, program, keep, [*values[:49], values[49][:-1]]) is None
    assert _avro_c.check_all(codec.header, program, keep, [*values[:10], bytearray(values[10])]) is None
    assert _avro_c.check_all(codec.header, program, keep, [*values[:10], None]) is None
    with pytest.raises(ValueError, match="program"):
        _avro_c.check_all(codec.header, b"\x09\x00", -1, values)
    strings = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    program, keep = check_program(strings)
    for text in ("", "é", "x" * 300, "\U0001f600" * 40):
        raw = b"H" + bytes(compile_writer(strings, b"")({"s": text}))
        assert _avro_c.check_all(b"H", program, keep, [raw]) == [None], text
    assert check_program({"type": "record", "name": "M", "fields": [{"name": "m", "type": {"type": "map", "values": "long"}}]}) is None


class _Str(str):
    pass


class _Int(int):
    pass


_HOSTILE_VALUES = [True, False, 1.5, math.nan, math.inf, -math.inf, -0.0, 2 ** 63, -(2 ** 63) - 1, 2 ** 31,
                   -(2 ** 31) - 1, 2 ** 53 + 1, 10 ** 400, "7", "lone \ud800", b"x", None, _Str("s"), _Int(3), [1]]


def test_the_two_writers_agree_on_hostile_values():
    """Field by field, values of every wrong type and edge: the C writer writes exactly the
    bytes the Python one writes, and refuses exactly what it refuses."""
    rng = random.Random(31)
    seen = {"writes": 0, "refuses": 0}
    for kind in FACT_KINDS:
        py, c = writer(kind, "python"), writer(kind, "c")
        names = [f.name for f in dataclasses.fields(_CODECS[kind].cls)]
        for _ in range(300):
            rec = dict(_random_fact(kind, rng).__dict__)
            for name in rng.sample(names, rng.choice([0, 1, 1, 2])):
                rec[name] = rng.choice(_HOSTILE_VALUES)
            a, b = _answer(py, rec), _answer(c, rec)
            assert a == b, (kind, rec)
            seen["writes" if a[0] == "takes" else "refuses"] += 1
    assert seen["writes"] > 500 and seen["refuses"] > 500, seen


def test_the_c_writer_reads_a_record_whatever_its_key_order():
    """A fact's dict in the schema's order is read in order; shuffled, with a field missing,
    with a key the schema does not have among them, or keyed by equal but other str objects,
    the C writer writes what the Python one writes (or refuses what it refuses), and the same
    record in any order is the same bytes."""
    rng = random.Random(7)
    for kind in FACT_KINDS:
        py, c = writer(kind, "python"), writer(kind, "c")
        for _ in range(60):
            rec = dict(_random_fact(kind, rng).__dict__)
            names = list(rec)
            shuffled = dict(rng.sample(list(rec.items()), len(rec)))
            missing = dict(rec)
            del missing[rng.choice(names)]
            extra = {}
            at = rng.randrange(len(names))
            for i, (k, v) in enumerate(rec.items()):
                if i == at:
                    extra["not_a_field"] = "x"
                extra[k] = v
            other_keys = {"".join(list(k)): v for k, v in rec.items()}  # equal, not the interned names
            assert all(a is not b for a, b in zip(other_keys, rec) if len(a) > 1)
            same = _answer(c, rec)
            assert same[0] == "takes"
            for variant in (shuffled, extra, other_keys):
                assert _answer(c, variant) == _answer(py, variant) == same, (kind, variant)
            assert _answer(c, missing) == _answer(py, missing) == ("refuses", None), kind
