"""The wire contract: versioned Avro schemas under ``schemas/avro/NAME.vN.avsc``.

Records are framed as one magic byte 0x00, a 4-byte big-endian schema version, then the
Avro body (schemaless). Readers resolve an older writer version into the current reader
schema (Avro schema resolution), so old records are upcast on read.
"""

from __future__ import annotations

import io
import json
import re
import struct
from functools import lru_cache
from pathlib import Path

import fastavro

__all__ = ["CodecError", "Codec", "latest_version", "load_schema", "schema_names", "versions"]

AVRO_DIR = Path(__file__).with_name("avro")
_FILE = re.compile(r"^(?P<name>[a-z0-9_]+)\.v(?P<version>\d+)\.avsc$")
_HEADER = struct.Struct(">BI")


class CodecError(ValueError):
    """Bytes that are not a gpuledger Avro record of the expected schema."""


def versions(name: str) -> list[int]:
    found = sorted(int(m["version"]) for p in AVRO_DIR.iterdir() if (m := _FILE.match(p.name)) and m["name"] == name)
    if not found:
        raise KeyError(f"no schema named {name!r} in {AVRO_DIR}")
    return found


def schema_names() -> list[str]:
    return sorted({m["name"] for p in AVRO_DIR.iterdir() if (m := _FILE.match(p.name))})


def latest_version(name: str) -> int:
    return versions(name)[-1]


@lru_cache(maxsize=None)
def load_schema(name: str, version: int) -> dict:
    raw = json.loads((AVRO_DIR / f"{name}.v{version}.avsc").read_text())
    return fastavro.parse_schema(raw)


class Codec:
    """Encode with the latest version of one schema; decode any known version into it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.version = latest_version(name)
        self.schema = load_schema(name, self.version)

    def encode(self, record: dict) -> bytes:
        buf = io.BytesIO()
        buf.write(_HEADER.pack(0, self.version))
        try:
            fastavro.schemaless_writer(buf, self.schema, record)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise CodecError(f"{self.name}: record does not fit schema v{self.version}: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes) -> dict:
        if not data or len(data) < _HEADER.size:
            raise CodecError(f"{self.name}: {len(data or b'')} bytes is too short for a framed Avro record")
        magic, version = _HEADER.unpack_from(data)
        if magic != 0:
            raise CodecError(f"{self.name}: bad magic byte {magic}")
        try:
            writer = load_schema(self.name, version)
        except (KeyError, FileNotFoundError) as exc:
            raise CodecError(f"{self.name}: unknown schema version {version}") from exc
        try:
            buf = io.BytesIO(data)
            buf.seek(_HEADER.size)
            reader = None if version == self.version else self.schema
            record = fastavro.schemaless_reader(buf, writer, reader)
        except Exception as exc:  # noqa: BLE001 — fastavro raises many kinds on bad bytes
            raise CodecError(f"{self.name}: undecodable body for v{version}: {exc!r}") from exc
        if buf.tell() != len(data):
            raise CodecError(f"{self.name}: {len(data) - buf.tell()} trailing bytes after the record")
        return record
