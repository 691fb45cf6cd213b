"""The Avro wire contract: every schema parses, round-trips, and each version can read the
one before it (backward compatibility, checked by real Avro schema resolution)."""

import copy
import io

import fastavro
import pytest

from gpuledger.schemas import Codec, CodecError, load_schema, schema_names, versions
from gpuledger.schemas.registry import AVRO_DIR


def example(schema) -> object:
    """A minimal valid datum for a (parsed) schema."""
    if isinstance(schema, list):
        return example(schema[0]) if schema[0] != "null" else None
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return {f["name"]: example(f["type"]) for f in schema["fields"]}
        if kind == "array":
            return [example(schema["items"])]
        return example(kind)
    return {"string": "x", "long": 1, "int": 1, "double": 0.5, "bytes": b"x", "boolean": True, "null": None}[schema]


def backward_compatible(old: dict, new: dict) -> bool:
    """Can a reader with ``new`` read data written with ``old``?"""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, example(old))
    buf.seek(0)
    try:
        fastavro.schemaless_reader(buf, old, new)
    except Exception:  # noqa: BLE001 — any resolution failure means incompatible
        return False
    return True


EXPECTED = {"k8s_watch_event", "podresources_snapshot", "dcgm_scrape", "vgpu_snapshot", "request_event",
            "reference_document", "dead_letter", "capacity_fact", "utilization_fact", "request_fact", "demand_fact", "clock_heartbeat",
            "model_scrape", "model_fact"}
EXPECTED |= {"gpu_health_fact", "gpu_health_incident"}
EXPECTED |= {"capacity_fact_batch", "utilization_fact_batch", "gpu_health_fact_batch"}  # streams/fact_batches.py


def test_a_schema_for_every_capture_file_and_fact():
    assert set(schema_names()) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_version_reads_the_previous(name):
    vs = versions(name)
    for old, new in zip(vs, vs[1:]):
        assert backward_compatible(load_schema(name, old), load_schema(name, new)), f"{name} v{old} -> v{new}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_round_trip(name):
    codec = Codec(name)
    record = example(codec.schema)
    assert codec.decode(codec.encode(record)) == record


def test_the_compatibility_check_can_fail():
    base = load_schema("dcgm_scrape", 1)
    added_with_default = copy.deepcopy(base)
    added_with_default["fields"].append({"name": "scrape_ms", "type": "long", "default": 0})
    added_without_default = copy.deepcopy(base)
    added_without_default["fields"].append({"name": "scrape_ms", "type": "long"})
    assert backward_compatible(base, fastavro.parse_schema(added_with_default))
    assert not backward_compatible(base, fastavro.parse_schema(added_without_default))


def test_bad_bytes_are_codec_errors():
    codec = Codec("dcgm_scrape")
    good = codec.encode({"observed_at_ms": 1, "ingested_at_ms": 2, "cluster_id": "c", "node": "n", "exposition": "e"})
    for bad in (b"", good[:-2], b"\x01" + good[1:], good[:1] + b"\x00\x00\x00\x63" + good[5:], good + b"zz"):
        with pytest.raises(CodecError):
            codec.decode(bad)
    assert (AVRO_DIR / "dcgm_scrape.v1.avsc").exists()
