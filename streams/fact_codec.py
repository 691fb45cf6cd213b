"""Facts on the wire: how workers put facts on the Kafka fact topics and how the sink reads them.

One Avro schema per kind of fact (``schema_name``), framed like every gpuledger record
(schemas/registry.py): a magic byte 0x00, the 4-byte big-endian schema version, then the
schemaless Avro body. Facts are written with the latest version; a value written with an
older version is read through Avro schema resolution into the latest one.

Built for throughput: each schema is parsed once, a fact is written by a writer compiled for
its schema (streams/avro_writer.py: fastavro's bytes, several times faster; fastavro writes
what it leaves), and a decoded record becomes its dataclass without a per-record copy (see
``_KindCodec.adopt``).

Numbers are checked on the way out and on the way in: a float field must be finite or null
(NaN or an infinity would be stored as is by ClickHouse's ``Float64`` / ``Nullable(Float64)``
columns and poison every sum over it; the domain code drops such samples long before), and an
integer must fit its Avro type (``long``: a signed 64-bit value; ``int``: 32-bit). A value that
breaks either is a ``FactCodecError`` (a ``ValueError``) naming the kind, fact id and field.

Every dataclass field must be a schema field of a compatible type, nullable exactly where the
dataclass allows ``None``, and the schema must hold nothing else: ``schema_mismatches`` says
what is wrong, and this module refuses to import while anything is.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import operator
import struct
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator

import fastavro

from gpuledger.domain.demand import DemandFact
from gpuledger.domain.facts import CapacityFact, FactBatch, UtilizationFact
from gpuledger.domain.gpu_health import GpuHealthFact
from gpuledger.domain.gpu_incidents import GpuHealthIncident
from gpuledger.domain.model_metrics import ModelFact
from gpuledger.domain.requests import RequestFact
from gpuledger.schemas.registry import CodecError, latest_version, load_schema
from gpuledger.streams.avro_writer import check_program, compile_checker, compile_writer, varint

try:  # built at install (pyproject.toml); a source tree without the build writes and checks in Python
    from gpuledger.streams._avro_c import check_all as _check_all
    from gpuledger.streams._avro_c import container as _container
    from gpuledger.streams._avro_c import write as _write
    from gpuledger.streams._avro_c import write_each as _write_each
except ImportError:  # pragma: no cover — tests/unit/streams/avro_cases.py requires it
    _check_all = _container = _write = _write_each = None

__all__ = ["BULK_KINDS", "FACT_CLASSES", "FACT_KINDS", "FactCodecError", "checked_kept", "container",
           "decode_facts", "emit_encoded", "encode_batch", "encode_fact", "iter_encoded", "ocf_header",
           "schema_mismatches", "schema_name"]

FACT_KINDS = ("capacity", "utilization", "requests", "demand", "models",
              "health", "health_incidents")  # as the FactBatch attributes
BULK_KINDS = ("capacity", "utilization", "health")  # most facts: the sink hands their bodies to the store as they came
FACT_CLASSES: dict[str, type] = {"capacity": CapacityFact, "utilization": UtilizationFact, "requests": RequestFact,
                                 "demand": DemandFact, "models": ModelFact,
                                 "health": GpuHealthFact, "health_incidents": GpuHealthIncident}
_SCHEMAS = {"capacity": "capacity_fact", "utilization": "utilization_fact", "requests": "request_fact",
            "demand": "demand_fact", "models": "model_fact",
            "health": "gpu_health_fact", "health_incidents": "gpu_health_incident"}
_HEADER = struct.Struct(">BI")
_AVRO_TYPES = {str: ("string",), int: ("long", "int"), float: ("double", "float")}
_RANGES = {"long": (-(2 ** 63), 2 ** 63 - 1), "int": (-(2 ** 31), 2 ** 31 - 1)}

_new, _setattr = object.__new__, object.__setattr__  # around a frozen dataclass's __setattr__

OnError = Callable[[int, bytes, str], None]  # (index in values, raw value, reason)


class FactCodecError(CodecError):
    """A fact that cannot be put on the wire, or bytes that are not a fact of the expected kind."""


def schema_name(kind: str) -> str:
    """The Avro schema (name without version) that carries facts of ``kind``."""
    try:
        return _SCHEMAS[kind]
    except KeyError:
        raise FactCodecError(f"unknown fact kind {kind!r}; kinds are {', '.join(FACT_KINDS)}") from None


def _avro_type(t) -> tuple[str, bool]:
    """(base type, nullable) of a parsed field type; ('', _) for anything but a primitive or [null, primitive]."""
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        return (rest[0] if len(rest) == 1 and isinstance(rest[0], str) else "", len(rest) < len(t))
    return (t, False) if isinstance(t, str) else ("", False)


def _python_type(hint) -> tuple[type | None, bool]:
    """(base type, nullable) of a dataclass annotation: ``str``, ``int | None``, ..."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return (rest[0] if len(rest) == 1 else None, len(rest) < len(typing.get_args(hint)))
    return hint, False


def schema_mismatches(cls: type, schema: dict) -> list[str]:
    """What keeps the (parsed) Avro record ``schema`` from carrying the dataclass ``cls`` whole;
    empty when every field maps to a schema field of a compatible type and nullability."""
    hints = typing.get_type_hints(cls)
    by_name = {f["name"]: f for f in schema["fields"]}
    out = []
    for f in dataclasses.fields(cls):
        base, nullable = _python_type(hints[f.name])
        if f.name not in by_name:
            out.append(f"{cls.__name__}.{f.name}: no such field in schema {schema['name']}")
            continue
        avro, avro_nullable = _avro_type(by_name[f.name]["type"])
        if avro not in _AVRO_TYPES.get(base, ()):
            hint = hints[f.name]
            out.append(f"{cls.__name__}.{f.name}: {getattr(hint, '__name__', hint)} does not fit Avro "
                       f"{by_name[f.name]['type']}")
        elif nullable != avro_nullable:
            out.append(f"{cls.__name__}.{f.name}: {'nullable' if nullable else 'not nullable'} in the dataclass, "
                       f"{'nullable' if avro_nullable else 'not nullable'} in the schema")
    names = {f.name for f in dataclasses.fields(cls)}
    out += [f"{schema['name']}.{n}: in the schema, not in {cls.__name__}" for n in by_name if n not in names]
    return out


class _KindCodec:
    """Everything about one kind of fact that need not be worked out per record."""

    def __init__(self, kind: str) -> None:
        self.kind, self.name, self.cls = kind, _SCHEMAS[kind], FACT_CLASSES[kind]
        self.version = latest_version(self.name)
        self.schema = load_schema(self.name, self.version)  # parsed once (load_schema is cached)
        problems = schema_mismatches(self.cls, self.schema)
        if problems:
            raise FactCodecError(f"{self.name} v{self.version} cannot carry {self.cls.__name__}: "
                                 + "; ".join(problems))
        self.header = _HEADER.pack(0, self.version)
        self.fields = tuple(f.name for f in dataclasses.fields(self.cls))
        self.values = operator.itemgetter(*self.fields)  # record dict -> positional args, in dataclass order
        # A record holds exactly the dataclass's fields (checked above), so a plain dataclass
        # (no __post_init__, no slots) can adopt it as its __dict__: ~0.5 us instead of ~8 us for
        # a frozen 23-field __init__. Anything else is built through __init__, positionally.
        self.adopt = not hasattr(self.cls, "__post_init__") and "__slots__" not in vars(self.cls)
        types_ = {f["name"]: _avro_type(f["type"])[0] for f in self.schema["fields"]}
        self.floats = tuple(n for n in self.fields if types_[n] in ("double", "float"))
        self.ints = tuple((n, *_RANGES[types_[n]]) for n in self.fields if types_[n] in _RANGES)
        self.fast = compile_writer(self.schema, self.header)  # same bytes as fastavro, checks included
        keep = "observed_at_ms" if kind == "utilization" else ""
        self.checker = compile_checker(self.schema, self.header, keep)
        self.program = check_program(self.schema, keep)  # the same check, for the C one (streams/_avro_c.c)
        # the writer in C (streams/_avro_c.c): the same bytes as ``fast``, None where it is not sure; the
        # names interned, as a dataclass's field names are, so that each lookup in a fact's dict matches
        # its key by identity (~15 % of the write)
        self.c_write = None if _write is None or self.fast is None or self.program is None else functools.partial(
            _write, self.header, self.program[0], tuple(sys.intern(f["name"]) for f in self.schema["fields"]))
        # ... and the one that writes a list of facts and hands each to a producer (``emit_encoded``)
        self.c_each = None if self.c_write is None or _write_each is None else functools.partial(
            _write_each, *self.c_write.args, self.cls)
        self.ocf_header = b""  # an empty object container file of the schema (``container``), made on first use

    def check(self, rec: dict) -> None:
        for n in self.floats:
            v = rec[n]
            if v is not None and not math.isfinite(v):
                raise FactCodecError(f"{self.kind} fact {rec.get('fact_id')!r}: {n} is {v!r}; a fact's numbers "
                                     "are finite or null (ClickHouse would store it and poison every sum)")
        for n, lo, hi in self.ints:
            v = rec[n]
            if v is not None and (type(v) is not int or v < lo or v > hi):
                if type(v) is not int:  # fastavro would truncate 1.5 to 1 without a word
                    raise FactCodecError(f"{self.kind} fact {rec.get('fact_id')!r}: {n} = {v!r} is of type "
                                         f"{type(v).__name__}, expected int")
                raise FactCodecError(f"{self.kind} fact {rec.get('fact_id')!r}: {n} = {v} is outside the Avro "
                                     f"{'long' if hi > 2 ** 31 else 'int'} range [{lo}, {hi}]")

    def encode(self, fact, buf: io.BytesIO) -> bytes:
        if type(fact) is not self.cls:
            raise FactCodecError(f"{self.kind}: expected a {self.cls.__name__}, got {type(fact).__name__}")
        rec = fact.__dict__
        if self.c_write is not None:
            value = self.c_write(rec)
            if value is not None:
                return value
        if self.fast is not None:
            try:
                return self.fast(rec)
            except Exception:  # noqa: BLE001 — NotFast, or a value it could not write: the general path says which
                pass
        buf.seek(0)
        buf.truncate()
        buf.write(self.header)
        try:
            self.check(rec)
            fastavro.schemaless_writer(buf, self.schema, rec)
        except FactCodecError:
            raise
        except Exception as exc:  # noqa: BLE001 — fastavro raises many kinds; name the field instead
            raise FactCodecError(self.explain(rec, exc)) from exc
        return buf.getvalue()

    def explain(self, rec: dict, exc: Exception) -> str:
        """Which field made the write fail (found only once it has failed)."""
        hints = typing.get_type_hints(self.cls)
        where = f"{self.kind} fact {rec.get('fact_id')!r}"
        for n in self.fields:
            v = rec[n]
            base, nullable = _python_type(hints[n])
            if v is None:
                if not nullable:
                    return f"{where}: {n} is None, and the schema does not allow null"
                continue
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) if base is float else (
                isinstance(v, base) and not isinstance(v, bool))
            if not ok:
                return f"{where}: {n} = {v!r} is of type {type(v).__name__}, expected {base.__name__}"
            if base is str:
                try:
                    v.encode()
                except UnicodeEncodeError as err:
                    return f"{where}: {n} is not encodable as UTF-8 ({err.reason} at {err.start})"
        return f"{where}: does not fit schema {self.name} v{self.version}: {exc!r}"

    def decode(self, raw: bytes, buf: io.BytesIO) -> object:
        if raw[:5] == self.header:
            writer, reader = self.schema, None
        else:
            if len(raw) < _HEADER.size:
                raise FactCodecError(f"{self.name}: {len(raw)} bytes is too short for a framed Avro record")
            magic, version = _HEADER.unpack_from(raw)
            if magic != 0:
                raise FactCodecError(f"{self.name}: bad magic byte {magic}")
            try:
                writer, reader = load_schema(self.name, version), self.schema
            except (KeyError, FileNotFoundError):
                raise FactCodecError(f"{self.name}: unknown schema version {version}") from None
        buf.seek(0)
        buf.truncate()
        buf.write(raw)
        buf.seek(_HEADER.size)
        try:
            rec = fastavro.schemaless_reader(buf, writer, reader)
        except Exception as exc:  # noqa: BLE001 — fastavro raises many kinds on bad bytes
            raise FactCodecError(f"{self.name}: undecodable body: {exc!r}") from exc
        if buf.tell() != len(raw):
            raise FactCodecError(f"{self.name}: {len(raw) - buf.tell()} trailing bytes after the record")
        self.check(rec)
        if self.adopt:
            fact = _new(self.cls)
            _setattr(fact, "__dict__", rec)
            return fact
        return self.cls(*self.values(rec))


_CODECS = {kind: _KindCodec(kind) for kind in FACT_KINDS}


def _codec(kind: str) -> _KindCodec:
    c = _CODECS.get(kind)
    if c is None:
        schema_name(kind)  # raises, naming the kinds
    return c


def encode_fact(kind: str, fact) -> bytes:
    """One fact of ``kind`` as a framed Avro value. Raises ``FactCodecError`` naming the field
    when a number is not finite, an integer is out of range or a value is of the wrong type."""
    return _codec(kind).encode(fact, io.BytesIO())


def decode_facts(kind: str, values: Iterable[bytes], on_error: OnError | None = None) -> list:
    """The facts of ``kind`` in ``values``, in order. A value that is not one raises
    ``FactCodecError``; with ``on_error`` it is reported as ``(index, raw, reason)`` and skipped."""
    c = _codec(kind)
    decode, buf, out = c.decode, io.BytesIO(), []
    append = out.append
    for i, raw in enumerate(values):
        try:
            append(decode(raw, buf))
        except Exception as exc:  # noqa: BLE001 — a value that is not a fact, however it fails
            if on_error is None:
                if isinstance(exc, FactCodecError):
                    raise
                raise FactCodecError(f"{c.name}: {exc!r}") from exc
            on_error(i, bytes(raw), str(exc) if isinstance(exc, FactCodecError) else f"{c.name}: {exc!r}")
    return out


def iter_encoded(batch: FactBatch, on_error: Callable[[str, object, FactCodecError], None] | None = None
                 ) -> Iterator[tuple[str, bytes, bytes]]:
    """Every fact of ``batch`` as ``(kind, key, value)``, kinds in ``FACT_KINDS`` order: the key
    is the fact id (UTF-8), so a fact written again lands on the partition it landed on before.
    One at a time: a producer hands each on before the next is encoded. A fact that cannot be
    encoded raises, or with ``on_error`` is handed to it ``(kind, fact, error)`` and left out."""
    buf = io.BytesIO()
    for kind in FACT_KINDS:
        encode = _CODECS[kind].encode
        for f in getattr(batch, kind):
            try:
                value = encode(f, buf)
            except FactCodecError as exc:
                if on_error is None:
                    raise
                on_error(kind, f, exc)
                continue
            yield kind, f.fact_id.encode(), value


def emit_encoded(batch: FactBatch, topics: dict[str, str], emit: Callable[[str, bytes, bytes], object],
                 on_full: Callable[[], object],
                 on_error: Callable[[str, object, FactCodecError], None] | None = None) -> int:
    """``iter_encoded`` handed to a producer: ``emit(topics[kind], value, key)`` for each fact, in
    the same order, with the same bytes; while ``emit`` raises ``BufferError`` (its queue is
    full), ``on_full()`` and ``emit`` again. The facts the C writer takes are written and emitted
    in one call per run of them (~0.3 us a fact less than a loop over ``iter_encoded``); any
    other is encoded here, ``on_error`` as in ``iter_encoded``. Returns the facts emitted."""
    buf, emitted = io.BytesIO(), 0
    for kind in FACT_KINDS:
        facts = getattr(batch, kind)
        if not facts:
            continue
        codec, topic, i, n = _CODECS[kind], topics[kind], 0, len(facts)
        if type(facts) is not list:
            facts = list(facts)
        while i < n:
            if codec.c_each is not None:
                j = codec.c_each(facts, i, emit, topic, on_full)
                emitted, i = emitted + j - i, j
                if i >= n:
                    break
            f = facts[i]
            i += 1
            try:
                value = codec.encode(f, buf)
            except FactCodecError as exc:
                if on_error is None:
                    raise
                on_error(kind, f, exc)
                continue
            key = f.fact_id.encode()
            while True:
                try:
                    emit(topic, value, key)
                    break
                except BufferError:
                    on_full()
            emitted += 1
    return emitted


def encode_batch(batch: FactBatch) -> list[tuple[str, bytes, bytes]]:
    """``iter_encoded`` as a list."""
    return list(iter_encoded(batch))


def checked_kept(kind: str, values: list[bytes]) -> list | None:
    """Each value's ``observed_at_ms`` (utilization; None for other kinds) when every one of
    ``values`` (framed facts of ``kind`` in the latest version) passes the checks
    ``decode_facts`` makes (whole record, UTF-8, finite, in range); None when any does not, or
    is of another version: then decode them one by one to find which."""
    c = _codec(kind)
    if c.checker is None:
        return None
    if _check_all is not None and c.program is not None:
        return _check_all(c.header, c.program[0], c.program[1], values if type(values) is list else list(values))
    try:
        return [c.checker(v) for v in values]
    except Exception:  # noqa: BLE001 — NotFast, or bytes that are not a record of the schema
        return None


def ocf_header(kind: str) -> bytes:
    """The header of an Avro object container file of ``kind``'s latest schema, uncompressed:
    magic, schema, codec, and the sync marker (its last 16 bytes) each block ends with."""
    c = _codec(kind)
    if not c.ocf_header:
        buf = io.BytesIO()
        fastavro.writer(buf, c.schema, [], codec="null")  # header only: no block
        c.ocf_header = buf.getvalue()
    return c.ocf_header


def container(kind: str, values: list[bytes]) -> bytes:
    """The bodies of ``values`` (framed facts of ``kind``'s latest schema, as ``checked_kept``
    takes them) as an Avro object container file, uncompressed, in one block: what
    ClickHouse's ``Avro`` input format reads, with no per-fact decoding."""
    head, skip = ocf_header(kind), _HEADER.size
    if _container is not None and type(values) is list:
        out = _container(head, values, skip, head[-16:])  # (each body copied once, in C)
        if out is not None:
            return out
    block = b"".join(memoryview(v)[skip:] for v in values)
    return b"".join((head, varint(len(values)), varint(len(block)), block, head[-16:]))
