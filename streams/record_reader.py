"""Source records as a worker reads them: ``Codec.decode`` (schemas/registry.py), with the
records of the version it reads taken in C where their schema is flat (streams/_avro_read.c
``read``: strings, longs, ints, doubles and ``[null, T]`` unions of them, every field read as
fastavro reads it). Whatever the C reader is not sure of (another version, a truncated or
over-long body, a string that is not strict UTF-8, an integer out of its type's range) goes to
fastavro, which gives the record or the ``CodecError``: the same record, or the same error, as
``Codec.decode`` for every value (tests/unit/streams/test_record_reader.py).

Why: fastavro's schemaless reader cost a worker ~13 us a DCGM scrape (a stream, a schema walk
and a dict per record); the C reader ~2 us, most of it the exposition's str.
"""

from __future__ import annotations

from gpuledger.schemas.registry import _HEADER, Codec
from gpuledger.streams.avro_writer import check_program

try:  # built at install (pyproject.toml), as the rest of _avro_c
    from gpuledger.streams._avro_c import read as _read
except ImportError:  # pragma: no cover — tests/unit/streams/test_record_reader.py requires it
    _read = None

__all__ = ["RecordReader"]


class RecordReader(Codec):
    """A ``Codec`` whose ``decode`` reads the version it encodes in C where it can."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        program = check_program(self.schema)
        self.fast = None if program is None or _read is None else (
            _HEADER.pack(0, self.version), program[0], tuple(f["name"] for f in self.schema["fields"]))

    def decode(self, data: bytes) -> dict:
        if self.fast is not None:
            record = _read(*self.fast, data)
            if record is not None:
                return record
        return super().decode(data)
