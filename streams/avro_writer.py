"""A schemaless Avro writer compiled for one flat record schema: the fact encoder's hot path.

fastavro's ``schemaless_writer`` resolves every field and union per record: 15-20 us for a
23-field utilization fact and 35-60 us for a 34-field health fact, most of a worker's time.
``compile_writer`` turns a record of primitives and ``[null, primitive]`` unions into one
Python function that writes the same bytes (Avro 1.11 binary encoding: zigzag varints for
``int``/``long``, little-endian IEEE 754 for ``double``/``float``, a varint length and UTF-8
for ``string``, the branch index before a union's value) in a few microseconds.

It only writes values it is sure of and checks what the fact codec checks: an integer is an
``int`` (never a ``bool``) within its Avro range, a float is finite (an ``int`` is accepted
for a ``double``, as fastavro does), a string is a ``str`` that encodes as UTF-8. Anything
else raises ``NotFast``, and the caller takes the general path, which names the field and
the fault. A schema with any other type gets no compiled writer (``None``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

__all__ = ["NotFast", "check_program", "compile_checker", "compile_writer", "varint"]


class NotFast(Exception):
    """A value the compiled writer leaves to the general path."""


_RANGES = {"long": (-(2 ** 63), 2 ** 63 - 1), "int": (-(2 ** 31), 2 ** 31 - 1)}
_SMALL = [bytes([n]) for n in range(128)]
_CACHE_MAX = 16_384


def varint(n: int) -> bytes:
    """The zigzag varint of ``n`` (caller checked the range)."""
    n = (n << 1) if n >= 0 else ((-n) << 1) - 1
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _unique(s: str) -> bytes:
    """A string's encoding, not cached."""
    if type(s) is not str:
        raise NotFast
    try:
        raw = s.encode()
    except UnicodeEncodeError:
        raise NotFast from None
    return varint(len(raw)) + raw


def _caches() -> tuple[dict, Callable[[str], bytes], dict, Callable[[int], bytes]]:
    """Encoded strings and integers by value, each with the function that fills it: names,
    tenants, pods, timestamps and offsets repeat fact after fact (a scrape's devices share
    them). Each cache is dropped whole when it reaches ``_CACHE_MAX`` entries."""
    strings: dict[str, bytes] = {}
    ints: dict[int, bytes] = {}

    def string(s: str) -> bytes:
        if len(strings) >= _CACHE_MAX:
            strings.clear()
        b = strings[s] = _unique(s)
        return b

    def integer(n: int) -> bytes:  # the caller checked type and range
        if len(ints) >= _CACHE_MAX:
            ints.clear()
        b = ints[n] = varint(n)
        return b
    return strings, string, ints, integer


def _value(kind: str, indent: str, unique: bool = False) -> list[str] | None:
    """Statements appending the encoding of ``v`` of Avro type ``kind``; ``unique``: a value
    that never repeats (a fact id), encoded without the cache."""
    if kind == "string" and unique:
        return [f"{indent}a(U(v))"]
    if kind == "string":  # a str key only ever maps to its own encoding: no type check needed on a hit
        return [f"{indent}b = SC.get(v) if type(v) is str else None", f"{indent}a(b if b is not None else S(v))"]
    if kind in _RANGES:
        lo, hi = _RANGES[kind]
        return [f"{indent}if type(v) is not int or v < {lo} or v > {hi}:", f"{indent}    raise NotFast",
                f"{indent}b = IC.get(v)", f"{indent}a(b if b is not None else I(v))"]
    if kind in ("double", "float"):
        pack = "D" if kind == "double" else "F"
        return [f"{indent}if type(v) is float:", f"{indent}    if v - v != 0.0:", f"{indent}        raise NotFast",
                f"{indent}elif type(v) is int:", f"{indent}    v = float(v)", f"{indent}    if v - v != 0.0:",
                f"{indent}        raise NotFast", f"{indent}else:", f"{indent}    raise NotFast", f"{indent}a({pack}(v))"]
    return None


def compile_writer(schema: dict, header: bytes) -> Callable[[dict], bytes] | None:
    """``header`` + the schemaless Avro body of a record dict, for a parsed flat record
    ``schema``; None when the schema holds a type this writer does not cover."""
    lines = ["def write(d):", "    p = [H]", "    a = p.append"]
    for f in schema["fields"]:
        name, t = f["name"], f["type"]
        lines.append(f"    v = d[{name!r}]")
        if isinstance(t, str):
            code = _value(t, "    ", unique=name == "fact_id")
        elif isinstance(t, list) and len(t) == 2 and "null" in t and isinstance(t[1 - t.index("null")], str):
            null_at = t.index("null")
            code = _value(t[1 - null_at], "        ")
            if code is not None:
                code = ["    if v is None:", f"        a({varint(null_at)!r})", "    else:",
                        f"        a({varint(1 - null_at)!r})", *code]
        else:
            code = None
        if code is None:
            return None
        lines += code
    lines.append("    return b''.join(p)")
    strings, string, ints, integer = _caches()
    scope = {"H": header, "SC": strings, "S": string, "U": _unique, "IC": ints, "I": integer, "D": struct.Struct("<d").pack,
             "F": struct.Struct("<f").pack, "NotFast": NotFast}
    exec(compile("\n".join(lines), f"<avro writer {schema.get('name', '?')}>", "exec"), scope)  # noqa: S102
    return scope["write"]


def _read_varint(raw: bytes, p: int) -> tuple[int, int]:
    """(zigzag-decoded value, next position) of the varint at ``p``; at most 10 bytes."""
    n = shift = 0
    for i in range(p, min(p + 10, len(raw))):
        b = raw[i]
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), i + 1
        shift += 7
    raise NotFast


# The varints of a ``long`` (< 2**64 once zigzagged: at most 10 bytes, the tenth 0 or 1) and of
# an ``int`` (< 2**32: at most 5 bytes, the fifth below 16) whose first byte is >= 0x80: where
# one ends, or None, without building its value.
_LONG_END = re.compile(rb"[\x80-\xff]{1,8}[\x00-\x7f]|[\x80-\xff]{9}[\x00\x01]").match
_INT_END = re.compile(rb"[\x80-\xff]{1,3}[\x00-\x7f]|[\x80-\xff]{4}[\x00-\x0f]").match


def _check_string(indent: str) -> list[str]:
    """Steps over a string at ``p`` inside a run of bytes checked as UTF-8 at once (from ``s``):
    a one-byte length is ASCII, so the run stays valid UTF-8 exactly when every string in it
    is; a longer length ends the run (what came before is checked, then the string alone)."""
    i = indent
    return [f"{i}b = raw[p]", f"{i}if b < 128:", f"{i}    if b & 1:", f"{i}        raise NotFast",
            f"{i}    p += 1 + (b >> 1)", f"{i}    if p > L:", f"{i}        raise NotFast", f"{i}else:",
            f"{i}    raw[s:p].decode()", f"{i}    n, p = R(raw, p)", f"{i}    e = p + n",
            f"{i}    if n < 0 or e > L:", f"{i}        raise NotFast", f"{i}    raw[p:e].decode()", f"{i}    p = s = e"]


def _check_value(kind: str, indent: str, keep: bool) -> list[str] | None:
    """Statements that step over a value of Avro type ``kind`` at ``p``, checking it."""
    if kind == "string":
        return _check_string(indent)
    if kind in _RANGES:
        if keep:
            lo, hi = _RANGES[kind]
            return [f"{indent}b = raw[p]", f"{indent}if b < 128:", f"{indent}    v = (b >> 1) ^ -(b & 1)",
                    f"{indent}    p += 1", f"{indent}else:", f"{indent}    v, p = R(raw, p)",
                    f"{indent}    if v < {lo} or v > {hi}:", f"{indent}        raise NotFast", f"{indent}kept = v"]
        end = "LE" if kind == "long" else "IE"
        return [f"{indent}if raw[p] < 128:", f"{indent}    p += 1", f"{indent}else:", f"{indent}    m = {end}(raw, p)",
                f"{indent}    if m is None:", f"{indent}        raise NotFast", f"{indent}    p = m.end()"]
    if kind == "double":
        return [f"{indent}v = UD(raw, p)[0]", f"{indent}if v - v != 0.0:", f"{indent}    raise NotFast",
                f"{indent}p += 8"]
    return None


def _flat(t) -> tuple[str | None, bool]:
    """(the primitive, whether it is a ``[null, primitive]`` union) of a field's type; the
    primitive is None for any other type."""
    nullable = isinstance(t, list) and len(t) == 2 and "null" in t and isinstance(t[1 - t.index("null")], str)
    return (t if isinstance(t, str) else t[1 - t.index("null")] if nullable else None), nullable


def compile_checker(schema: dict, header: bytes, keep: str = "") -> Callable[[bytes], int | None] | None:
    """A function that checks one framed value (``header`` + body) is a whole record of the
    flat ``schema`` and nothing more: every string valid UTF-8, every double finite, every
    integer within its type, no trailing bytes; it returns the value of the integer field
    ``keep`` (None without one) and raises (``NotFast``, ``IndexError``, ``UnicodeDecodeError``,
    ``struct.error``) on anything else. None when the schema holds a type it does not cover.

    Consecutive string fields (and the union branches between them) are checked as UTF-8 in
    one ``decode`` of the bytes they span, not one per string. The sink runs the same check in
    C over a whole poll (``check_program``, streams/_avro_c.c); this one is its reference,
    and the path of a source tree without the build."""
    lines = ["def check(raw):", f"    if raw[:{len(header)}] != H:", "        raise NotFast",
             f"    p, L, kept = {len(header)}, len(raw), None"]
    in_run = False  # a run of strings is open: bytes from ``s`` to ``p`` are still to be checked
    for f in schema["fields"]:
        t, k = f["type"], f["name"] == keep
        kind, nullable = _flat(t)
        if kind == "string" and not in_run:
            lines.append("    s = p")
        elif kind != "string" and in_run:
            lines.append("    raw[s:p].decode()")
        in_run = kind == "string"
        if isinstance(t, str):
            code = _check_value(t, "    ", k)
        elif nullable:
            null_at = t.index("null")
            code = _check_value(kind, "        ", k)
            if code is not None:
                code = ["    b = raw[p]", "    p += 1", f"    if b == {2 * (1 - null_at)}:", *code,
                        f"    elif b != {2 * null_at}:", "        raise NotFast"]
        else:
            code = None
        if code is None:
            return None
        lines += code
    if in_run:
        lines.append("    raw[s:p].decode()")
    lines += ["    if p != L:", "        raise NotFast", "    return kept"]
    scope = {"H": header, "R": _read_varint, "UD": struct.Struct("<d").unpack_from, "NotFast": NotFast,
             "LE": _LONG_END, "IE": _INT_END}
    exec(compile("\n".join(lines), f"<avro checker {schema.get('name', '?')}>", "exec"), scope)  # noqa: S102
    return scope["check"]


_PROGRAM_TYPES = {"string": 1, "long": 2, "int": 3, "double": 4}


def check_program(schema: dict, keep: str = "") -> tuple[bytes, int] | None:
    """What ``compile_checker`` checks, as the program of the C check (streams/_avro_c.c):
    two bytes per field (its type, and 0 / 1 / 2 for not a union / null as branch 0 / null
    as branch 1) and the index of the field ``keep`` (-1 without one). None when the schema
    holds a type the checks do not cover (as ``compile_checker``)."""
    program, kept = bytearray(), -1
    for i, f in enumerate(schema["fields"]):
        t = f["type"]
        kind, nullable = _flat(t)
        if kind not in _PROGRAM_TYPES:
            return None
        program += bytes([_PROGRAM_TYPES[kind], 1 + t.index("null") if nullable else 0])
        if f["name"] == keep:
            kept = i
    return bytes(program), kept
