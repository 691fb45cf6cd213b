"""Avro schemas (the wire contract) and the one codec module that reads and writes them."""

from gpuledger.schemas.registry import Codec, CodecError, latest_version, load_schema, schema_names, versions

__all__ = ["Codec", "CodecError", "latest_version", "load_schema", "schema_names", "versions"]
