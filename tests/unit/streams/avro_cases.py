"""What the Avro tests share: random facts of every kind, and the two implementations of the
fact writer and of the sink's check (Python: streams/avro_writer.py; C: streams/_avro_write.c and
_avro_c.c)."""

import dataclasses
import math
import random

from gpuledger.domain.facts import FactBatch
from gpuledger.streams import _avro_c  # built at install: a missing build fails here, not silently slower
from gpuledger.streams.avro_writer import NotFast, check_program, compile_checker
from gpuledger.streams.fact_codec import _CODECS, FACT_KINDS

# The checker's two implementations (one in Python, one in C: streams/_avro_c.c); every
# checker test runs against both, and test_the_two_checkers_agree_on_corrupted_values holds
# them to the same answer value by value.
CHECKERS = ("python", "c")


def compiled(schema: dict, header: bytes, keep: str, impl: str):
    """One value -> its kept field, raising on a value refused (the C one raises NotFast)."""
    if impl == "python":
        return compile_checker(schema, header, keep)
    program, index = check_program(schema, keep)

    def check(raw: bytes):
        kept = _avro_c.check_all(header, program, index, [raw])
        if kept is None:
            raise NotFast
        return kept[0]
    return check


def checker(kind: str, impl: str):
    codec = _CODECS[kind]
    return compiled(codec.schema, codec.header, "observed_at_ms" if kind == "utilization" else "", impl)


# The writer's two implementations too: the C one (``write``) answers None where the Python
# one raises NotFast, and the codec then takes the Python one (then the general path).
WRITERS = ("python", "c")


def writer(kind: str, impl: str):
    """A record dict -> its framed bytes, raising NotFast for what the writer is not sure of."""
    codec = _CODECS[kind]
    if impl == "python":
        return codec.fast
    program, _ = check_program(codec.schema)
    names = tuple(f["name"] for f in codec.schema["fields"])

    def write(rec: dict) -> bytes:
        value = _avro_c.write(codec.header, program, names, rec)
        if value is None:
            raise NotFast
        return value
    return write


STRINGS = ["", "a", "node-17", "GPU-5e1f0000-dead-4bee-8000-00000000beef", "ü", "日本語", "🚀 rocket", "x" * 200,
           "quote\"and\\backslash", "\x00nul"]
LONGS = [0, 1, -1, 63, 64, -64, -65, 127, 128, 8191, 8192, 2 ** 31 - 1, -(2 ** 31), 2 ** 40 + 7, 1_790_812_800_123,
         2 ** 63 - 1, -(2 ** 63)]
INTS = [0, 1, -1, 63, 64, -65, 300, 2 ** 31 - 1, -(2 ** 31)]
FLOATS = [0.0, -0.0, 1.0, -2.5, 0.1, 1e-310, 1e300, 85.0, 3, -7, 2 ** 53]


def avro_type(schema: dict, field: str) -> tuple[str, bool]:
    t = next(f["type"] for f in schema["fields"] if f["name"] == field)
    return (t, False) if isinstance(t, str) else (next(x for x in t if x != "null"), True)


def random_fact(kind: str, rng: random.Random):
    codec = _CODECS[kind]
    values = {}
    for f in dataclasses.fields(codec.cls):
        avro, nullable = avro_type(codec.schema, f.name)
        if nullable and rng.random() < 0.3:
            values[f.name] = None
        elif avro == "string":
            values[f.name] = rng.choice(STRINGS)
        elif avro == "long":
            values[f.name] = rng.choice(LONGS)
        elif avro == "int":
            values[f.name] = rng.choice(INTS)
        else:
            values[f.name] = rng.choice(FLOATS)
    return codec.cls(**values)


class Queue:
    """A producer's produce and the wait for room: with ``full_every`` > 0, after every so many
    records taken it refuses with BufferError, as a full librdkafka queue does, until
    ``on_full`` makes room."""

    def __init__(self, full_every: int = 0) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.headers: list = []  # each record's Kafka headers (None: none)
        self.full_every, self.calls, self.waits, self.taken_since_wait = full_every, 0, 0, 0

    def produce(self, topic: str, value: bytes, key: bytes, headers=None) -> None:
        self.calls += 1
        if self.full_every and self.taken_since_wait >= self.full_every:
            raise BufferError("Local: Queue full")
        self.taken_since_wait += 1
        self.sent.append((topic, value, key))
        self.headers.append(headers)

    def on_full(self) -> None:
        self.waits += 1
        self.taken_since_wait = 0


def hostile_fact(kind: str, fact, rng: random.Random):
    """A fact the C writer leaves to the Python path: a value of another type or out of range, one
    the wire refuses, or an object that is not the kind's class at all."""
    codec = _CODECS[kind]
    ints = [n for n, _lo, _hi in codec.ints]
    floats = list(codec.floats)
    choice = rng.randrange(5)
    if choice == 0 and floats:
        return dataclasses.replace(fact, **{rng.choice(floats): math.nan})  # refused: FactCodecError
    if choice == 1 and ints:
        return dataclasses.replace(fact, **{rng.choice(ints): 2 ** 70})  # refused: out of range
    if choice == 2 and floats:
        return dataclasses.replace(fact, **{rng.choice(floats): 3})  # an int for a double: written by Python
    if choice == 3:
        return dataclasses.replace(fact, fact_id="id-\u00e9\u65e5")  # not ASCII: still the C writer's
    return object()  # not a fact: FactCodecError


def random_batch(rng: random.Random, hostile: float) -> FactBatch:
    batch = FactBatch()
    for kind in FACT_KINDS:
        facts = []
        for _ in range(rng.choice((0, 1, 3, 40))):
            f = random_fact(kind, rng)
            facts.append(hostile_fact(kind, f, rng) if rng.random() < hostile else f)
        setattr(batch, kind, facts)
    return batch
