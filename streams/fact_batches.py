"""Facts of the bulk kinds (capacity, utilization, health: nearly every fact) travel many to a
Kafka record: a worker writes batch records, the sink splits them back into single facts.

A batch record's value is framed like every gpuledger record (schemas/registry.py): 0x00, the
4-byte big-endian version of the kind's batch schema (``<fact schema>_batch``, e.g.
``utilization_fact_batch``), then the Avro body of that schema: one field ``facts``, an Avro
array of the fact schema at the version the batch schema names (its ``fact_version``). The
array is written as one block: the count, the facts' bodies back to back, then 0. The record
carries the Kafka header ``gpuledger-batch`` (``BATCH_HEADER``), which is how a reader tells it
from a single fact (a value of ``streams/fact_codec.py``) on the same topic; its key is the
first fact's id. Every fact keeps its own ``fact_id`` inside, and the store deduplicates by it
as before, so a batch written again (at-least-once) changes nothing.

Why: one Kafka record per fact cost a worker ~1 us of CPU per fact in the producer (the
produce call, librdkafka's queueing, framing and checksums per record; ~2.3 facts a device
sample) and the sink as much again per record read. A batch of ``BATCH_MAX_BYTES`` holds
~1,000-2,000 facts.

``emit_batched`` is ``emit_encoded`` with the bulk kinds batched: the same bytes per fact (a
batch's items are exactly the bodies ``encode_fact`` writes after its 5-byte header), the same
``on_error`` for a fact that cannot be encoded. ``split_batch`` gives back the framed single
facts of a batch, every item checked as the sink checks single values (whole records, UTF-8,
finite numbers, integer ranges, nothing after the array), or raises ``FactCodecError``: the
sink then dead-letters the whole record with its position, since no item boundary can be
trusted past a broken one.

``checked_batch`` makes the same checks without splitting: the sink keeps a batch that passes
them as it came, and ``batch_container`` copies its array's blocks, each in one piece, into
the Avro container the store reads (a block of the container a block of the array).
"""

from __future__ import annotations

import functools
import io
import types
from collections.abc import Callable

import fastavro

from gpuledger.domain.facts import FactBatch
from gpuledger.schemas.registry import latest_version, load_schema
from gpuledger.streams.avro_writer import _read_varint, check_program, varint
from gpuledger.streams.fact_codec import (_CODECS, _HEADER, BULK_KINDS, FACT_KINDS, FactCodecError, emit_encoded,
                                          ocf_header)

try:  # built at install (pyproject.toml), as the rest of _avro_c
    from gpuledger.streams._avro_c import batch_container as _batch_container
    from gpuledger.streams._avro_c import body_of as _body_of
    from gpuledger.streams._avro_c import check_batch as _check_batch
    from gpuledger.streams._avro_c import split_batch as _split_batch
    from gpuledger.streams._avro_c import write_bodies as _write_bodies
except ImportError:  # pragma: no cover — tests/unit/streams/avro_cases.py requires it
    _batch_container = _body_of = _check_batch = _split_batch = _write_bodies = None

__all__ = ["BATCH_HEADER", "BATCH_HEADERS", "BATCH_MAX_BYTES", "batch_container", "batch_schema_name",
           "checked_batch", "emit_batched", "encode_fact_bodies", "is_batch", "split_batch"]

BATCH_HEADER = ("gpuledger-batch", b"1")  # the Kafka header of a batch record
BATCH_HEADERS = [BATCH_HEADER]
BATCH_MAX_BYTES = 262_144  # the facts' bodies in one batch record, at most (one fact past it)
_END = b"\x00"  # the array's closing block


def batch_schema_name(kind: str) -> str:
    """The Avro schema of ``kind``'s batch records (a bulk kind)."""
    if kind not in BULK_KINDS:
        raise FactCodecError(f"{kind} facts are not batched; batched kinds are {', '.join(BULK_KINDS)}")
    return f"{_CODECS[kind].name}_batch"


def is_batch(headers) -> bool:
    """Are these a Kafka record's headers (``msg.headers()``) those of a batch record?"""
    return bool(headers) and BATCH_HEADER in headers


class _Writer:
    """What writing one bulk kind's batches needs, worked out once."""

    def __init__(self, kind: str) -> None:
        c = _CODECS[kind]
        name = batch_schema_name(kind)
        self.version = latest_version(name)
        fact_version = load_schema(name, self.version).get("fact_version")
        if fact_version != c.version:
            raise FactCodecError(f"{name} v{self.version} carries {c.name} v{fact_version}, but facts are written "
                                 f"as v{c.version}: add {name}.v{self.version + 1}.avsc with fact_version "
                                 f"{c.version} and the items of {c.name}.v{c.version}.avsc")
        self.header = _HEADER.pack(0, self.version)
        self.codec = c
        self.bodies = None if _write_bodies is None or c.c_write is None else functools.partial(
            _write_bodies, c.program[0], c.c_write.args[2], c.cls)


@functools.lru_cache(maxsize=None)
def _reader(kind: str, version: int):
    """(batch header, fact header, C program or None, batch schema, fact schema, fact version)
    for ``kind``'s batch records of ``version``."""
    name = batch_schema_name(kind)
    try:
        schema = load_schema(name, version)
    except (KeyError, FileNotFoundError):
        raise FactCodecError(f"{name}: unknown schema version {version}") from None
    fact_version = schema["fact_version"]
    fact_schema = load_schema(_CODECS[kind].name, fact_version)
    program = check_program(fact_schema, "")
    return (_HEADER.pack(0, version), _HEADER.pack(0, fact_version), None if program is None else program[0], schema,
            fact_schema, fact_version)


_WRITERS = {kind: _Writer(kind) for kind in BULK_KINDS}


def emit_batched(batch: FactBatch, topics: dict[str, str], emit: Callable[..., object], on_full: Callable[[], object],
                 on_error: Callable[[str, object, FactCodecError], None] | None = None,
                 max_bytes: int = BATCH_MAX_BYTES) -> int:
    """``batch`` handed to a producer: each bulk kind's facts in batch records,
    ``emit(topics[kind], value, key, headers=BATCH_HEADERS)``, in order, each holding the facts'
    bodies up to ``max_bytes`` (and the fact that reaches it); every other kind's facts one
    record each, as ``emit_encoded`` hands them. While ``emit`` raises ``BufferError``,
    ``on_full()`` and ``emit`` again. A fact that cannot be encoded raises, or with
    ``on_error`` is handed to it ``(kind, fact, error)`` and left out. Returns the facts emitted."""
    emitted = 0
    for kind in BULK_KINDS:
        facts = getattr(batch, kind)
        if facts:
            emitted += _emit_kind(kind, facts if type(facts) is list else list(facts), topics[kind], emit, on_full,
                                  on_error, max_bytes)
    rest = types.SimpleNamespace(**{k: [] if k in BULK_KINDS else getattr(batch, k) for k in FACT_KINDS})
    return emitted + emit_encoded(rest, topics, emit, on_full, on_error)


def _emit_kind(kind: str, facts: list, topic: str, emit, on_full, on_error, max_bytes: int) -> int:
    w = _WRITERS[kind]
    parts: list[bytes] = []
    size = count = emitted = i = 0
    first_id = ""
    n = len(facts)
    buf = io.BytesIO()

    def send() -> None:
        value = b"".join((w.header, varint(count), *parts, _END))
        while True:
            try:
                emit(topic, value, first_id.encode(), headers=BATCH_HEADERS)
                return
            except BufferError:
                on_full()

    while i < n:
        start = i
        bodies, i = w.bodies(facts, i, max_bytes - size) if w.bodies is not None else (b"", i)
        if i == start:  # one the C writer leaves: the Python writer writes it or names what is wrong
            i += 1
            try:
                bodies = w.codec.encode(facts[start], buf)[_HEADER.size:]
            except FactCodecError as exc:
                if on_error is None:
                    if count:
                        send()
                    raise
                on_error(kind, facts[start], exc)
                continue
        if not count:
            first_id = _fact_id_of(facts[start])
        parts.append(bodies)
        size, count = size + len(bodies), count + i - start
        if size >= max_bytes:
            send()
            emitted += count
            parts, size, count = [], 0, 0
    if count:
        send()
        emitted += count
    return emitted


def _fact_id_of(fact) -> str:
    """A fact's id, or the id a fact's Avro body starts with (``fact_id`` is the first field of
    every fact schema: a zigzag varint length, then the id's UTF-8)."""
    if type(fact) is not bytes:
        return fact.fact_id
    length, start = _read_varint(fact, 0)
    return fact[start:start + length].decode()


def encode_fact_bodies() -> bool:
    """From now on, the engine's utilization facts of exclusive GPUs and its health facts are
    made as the Avro bodies the batch records carry (``Engine(encoded=True)``:
    domain/samples.py, domain/gpu_incidents.py ``HealthFold.scrape``), by this module's writer
    and with its checks: a worker writes them to the fact topics and nothing else. False where
    the C modules are not built or a schema is not the fields they build (the facts then stay
    facts)."""
    if _body_of is None or any(_WRITERS[k].bodies is None for k in ("utilization", "health")):
        return False
    from gpuledger.domain import _facts, _health
    from gpuledger.domain.gpu_health import GpuHealthFact
    util, health = (_WRITERS[k].bodies.args for k in ("utilization", "health"))
    return _facts.set_body_writer(_body_of, util[0], util[1]) & _health.set_body_writer(
        _body_of, health[0], health[1], tuple(GpuHealthFact.__dataclass_fields__))


def split_batch(kind: str, value: bytes) -> list[bytes]:
    """The facts of a batch record of ``kind``, each a framed single fact (what ``decode_facts``
    and the sink's bulk path read), in order. Raises ``FactCodecError`` when ``value`` is not a
    whole batch of a known version."""
    name = batch_schema_name(kind)
    if len(value) < _HEADER.size:
        raise FactCodecError(f"{name}: {len(value)} bytes is too short for a framed Avro record")
    magic, version = _HEADER.unpack_from(value)
    if magic != 0:
        raise FactCodecError(f"{name}: bad magic byte {magic}")
    header, fact_header, program, schema, fact_schema, fact_version = _reader(kind, version)
    what = f"{name} v{version}: not a whole batch of {_CODECS[kind].name} v{fact_version}"
    if program is not None and _split_batch is not None:
        out = _split_batch(header, fact_header, program, value if type(value) is bytes else bytes(value))
        if out is None:
            raise FactCodecError(f"{what} (an item that is not a whole record of it, a string that is not UTF-8, a "
                                 "number that is not finite or out of range, or bytes after the array)")
        return out
    buf = io.BytesIO(value)
    buf.seek(_HEADER.size)
    try:
        items = fastavro.schemaless_reader(buf, schema, None)["facts"]
    except Exception as exc:  # noqa: BLE001 — fastavro raises many kinds on bad bytes
        raise FactCodecError(f"{what}: {exc!r}") from exc
    if buf.tell() != len(value):
        raise FactCodecError(f"{what}: {len(value) - buf.tell()} trailing bytes after the array")
    out = []
    for item in items:
        try:
            if fact_version == _CODECS[kind].version:
                _CODECS[kind].check(item)
            one = io.BytesIO()
            one.write(fact_header)
            fastavro.schemaless_writer(one, fact_schema, item)
        except Exception as exc:  # noqa: BLE001 — a value the checks or the writer refuse
            raise FactCodecError(f"{what}: {exc}") from exc
        out.append(one.getvalue())
    return out


def checked_batch(kind: str, value: bytes) -> tuple[int, list | None, tuple] | None:
    """``value``, a batch record of ``kind``, checked as ``split_batch`` checks it but with no
    fact copied: (the facts' count, each one's ``observed_at_ms`` as ``checked_kept`` gives it
    (utilization; None for other kinds), the ``(count, from, to)`` of each block of its array
    for ``batch_container``) when it is a whole batch of ``kind``'s latest fact version; None
    when it is not, holds facts of another version, or the C module is not built: then
    ``split_batch`` splits it or names what is wrong."""
    c = _CODECS[kind]
    if _check_batch is None or c.program is None or type(value) is not bytes or len(value) < _HEADER.size:
        return None
    magic, version = _HEADER.unpack_from(value)
    if magic != 0:
        return None
    try:
        header, _, _, _, _, fact_version = _reader(kind, version)
    except FactCodecError:
        return None
    if fact_version != c.version:
        return None
    return _check_batch(header, c.program[0], c.program[1], value)


def batch_container(kind: str, records: list[tuple[bytes, tuple]]) -> bytes:
    """An Avro object container file of ``kind``'s latest schema (as ``container`` makes from
    single values) holding the facts of batch records, each ``(value, spans)`` with the spans
    ``checked_batch`` gave: a block of the file for each block of their arrays, its bodies
    copied in one piece."""
    head = ocf_header(kind)
    if _batch_container is not None and type(records) is list:
        out = _batch_container(head, records, head[-16:])
        if out is not None:
            return out
    parts = [head]
    for value, spans in records:
        for count, start, end in spans:
            parts += (varint(count), varint(end - start), memoryview(value)[start:end], head[-16:])
    return b"".join(parts)
