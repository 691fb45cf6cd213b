"""What the Avro tests share: random facts of every kind, and the two implementations of the
fact writer and of the sink's check (Python: streams/avro_writer.py; C: streams/_avro_write.c and
_avro_c.c)."""

import dataclasses
import random

from gpuledger.streams import _avro_c  # built at install: a missing build fails here, not silently slower
from gpuledger.streams.avro_writer import NotFast, check_program, compile_checker
from gpuledger.streams.fact_codec import _CODECS

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
