"""Facts on the fact topics (streams/fact_codec.py): every kind round-trips whole, nulls,
hostile strings and 64-bit values included; a number that is not finite is refused, naming
its field; and every dataclass field has its schema field, so a field added without one
fails here."""

import dataclasses
import io
import json
import math
import typing
from pathlib import Path

import fastavro
import pytest

from gpuledger.domain.demand import DemandFact, closed_demand
from gpuledger.domain.facts import CapacityFact, FactBatch, SourcePos, UtilizationFact, fact_id
from gpuledger.domain.gpu_health import GpuHealthFact, health_facts
from gpuledger.domain.gpu_incidents import GpuHealthIncident, HealthFold
from gpuledger.domain.k8s import LABEL_TENANT, OwnershipBook
from gpuledger.domain.model_metrics import ModelFact, model_facts
from gpuledger.domain.requests import RequestFact, request_fact
from gpuledger.schemas import latest_version, load_schema
from gpuledger.schemas.registry import AVRO_DIR
from gpuledger.sinks.health_sql import HEALTH_COLUMNS, INCIDENT_COLUMNS
from gpuledger.sinks.schema_sql import CAPACITY_COLUMNS, DEMAND_COLUMNS, REQUEST_COLUMNS, UTILIZATION_COLUMNS
from gpuledger.sinks.schema_sql import MODEL_COLUMNS
from gpuledger.streams.fact_codec import (FACT_CLASSES, FACT_KINDS, FactCodecError, decode_facts, encode_batch,
                                          encode_fact, schema_mismatches, schema_name)

T = 1_790_000_000_000
POS = SourcePos("gpuledger.source.dcgm", 7, 123_456_789)
GPU = "GPU-6f1a2b3c-0d4e-5f60-7182-93a4b5c6d7e8"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def capacity(**kw) -> CapacityFact:
    base = dict(fact_id=fact_id("capacity", "prod-ai-1", GPU, T), cluster_id="prod-ai-1", kind="allocated",
                gpu_uuid=GPU, device_id=f"MIG-{GPU[4:]}", node="node-a", gpu_class="h100-80gb", mode="mig",
                profile="3g.40gb",
                capacity_fraction=3 / 7, valid_from_ms=T, valid_to_ms=T + 3_600_000, tenant_id="alpha",
                project_id="vision", cost_center="cc-1234", namespace="alpha-ns", namespace_uid="ns-uid-1",
                pod_name="train-0", pod_uid="pod-uid-1", container="trainer", endpoint_id="", workload_kind="pod",
                confidence="high", reason="", src_topic="gpuledger.source.podresources", src_partition=3,
                src_offset=42)
    return CapacityFact(**{**base, **kw})


def utilization(**kw) -> UtilizationFact:
    base = dict(fact_id=fact_id("util", GPU, T), cluster_id="prod-ai-1", gpu_uuid=GPU, device_id=GPU, node="node-a",
                observed_at_ms=T + 15_000, span_ms=15_000, sm_active_ratio=0.8125, fb_used_bytes=61_203_283_968,
                power_w=612.25, energy_j=9.87e9, capacity_fact_id=fact_id("capacity", "prod-ai-1", GPU, T),
                kind="allocated", tenant_id="alpha", project_id="vision", namespace="alpha-ns", pod_name="train-0",
                pod_uid="pod-uid-1", confidence="high", reason="", src_topic=POS.topic, src_partition=POS.partition,
                src_offset=POS.offset)
    return UtilizationFact(**{**base, **kw})


def request(**kw) -> RequestFact:
    fact = request_fact({"cluster_id": "prod-ai-1", "endpoint_id": "chat", "model": "llama-3-70b", "revision": "r7",
                         "request_id": "req-0001", "tenant_id": "beta", "project_id": "assist",
                         "observed_at_ms": T + 900, "arrived_at_ms": T, "outcome": "success", "prompt_tokens": 812,
                         "completion_tokens": 240,
                         "queue_s": 0.012, "ttft_s": 0.21, "e2e_s": 0.9}, SourcePos("gpuledger.source.requests", 1, 99))
    return dataclasses.replace(fact, **kw)


def demand(**kw) -> DemandFact:
    """Through the real fold: a namespace of tenant gamma, a pod asking for two 1g.10gb
    instances that waited 5 minutes before it ran."""
    book = OwnershipBook()
    book.apply("ADDED", {"kind": "Namespace", "metadata": {"uid": "ns-g", "name": "gamma-ns",
                                                           "labels": {LABEL_TENANT: "gamma"}}}, T - 3_600_000)
    pod = {"kind": "Pod", "metadata": {"uid": "pod-g", "name": "infer-0", "namespace": "gamma-ns"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}}]},
           "status": {"phase": "Pending"}}
    book.apply("ADDED", pod, T)
    book.apply("MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": "node-b"}, "status": {"phase": "Running"}},
               T + 300_000)
    (fact,) = [f for f in closed_demand(book, "prod-ai-1", T + 600_000, set()) if f.outcome == "scheduled"]
    assert (fact.tenant_id, fact.instances, fact.waited_to_ms - fact.waited_from_ms) == ("gamma", 2, 300_000)
    assert (fact.node, fact.scheduled_ms, fact.running_ms, fact.priority) == ("node-b", T + 300_000, T + 300_000, None)
    return dataclasses.replace(fact, **kw)


def health(**kw) -> GpuHealthFact:
    """Through the parser: a real-format H100 scrape with every health field."""
    text = (FIXTURES / "dcgm" / "dcgm-metrics-health-h100.constructed.txt").read_text()
    fact = health_facts("prod-ai-1", "gpu-node-1", T, text, POS)[0]
    assert fact.fb_total_bytes == 81559 * 2 ** 20 and fact.power_violation_s == 1.25
    return dataclasses.replace(fact, **kw)


def health_incident(**kw) -> GpuHealthIncident:
    (fact,) = HealthFold().observe(health(xid_last=79, gpu_instance_id=3))
    assert (fact.kind, fact.code, fact.severity) == ("xid", 79, "critical")
    return dataclasses.replace(fact, **kw)


MAKE = {"capacity": capacity, "utilization": utilization, "requests": request, "demand": demand}
MAKE.update(health=health, health_incidents=health_incident)


def model(**kw) -> ModelFact:
    """Through the parser: two scrapes of the real vLLM sample."""
    text = (FIXTURES / "inference" / "vllm-metrics-qwen2.5-0.5b.txt").read_text()
    series: dict = {}
    for at in (T - 30_000, T):
        (fact,), _ = model_facts(series, {"observed_at_ms": at, "cluster_id": "prod-ai-1", "endpoint_id": "chat",
                                          "pod": "chat-0", "revision": "sha256:9f1c", "exposition": text}, POS, 300_000)
    assert fact.span_ms == 30_000 and fact.generation_tokens == 0.0
    return dataclasses.replace(fact, **kw)


MAKE.update(models=model)


def round_trip(kind, fact):
    (back,) = decode_facts(kind, [encode_fact(kind, fact)])
    assert type(back) is type(fact) and back == fact
    return back


def hints(cls) -> dict:
    return typing.get_type_hints(cls)


def nullable_fields(cls) -> list[str]:
    return [n for n, h in hints(cls).items() if type(None) in typing.get_args(h)]


def float_fields(cls) -> list[str]:
    return [n for n, h in hints(cls).items() if h is float or float in typing.get_args(h)]


@pytest.mark.parametrize("kind", FACT_KINDS)
def test_every_kind_round_trips(kind):
    fact = MAKE[kind]()
    back = round_trip(kind, fact)
    assert dataclasses.asdict(back) == dataclasses.asdict(fact) and hash(back) == hash(fact)
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.fact_id = "x"  # still the frozen dataclass it was


def test_a_batch_is_keyed_by_fact_id_and_decodes_per_kind():
    batch = FactBatch([capacity(), capacity(fact_id="c2", valid_from_ms=T + 1)],
                      [utilization(fact_id=f"u{i}", observed_at_ms=T + i) for i in range(5)], [request()], [demand()])
    messages = encode_batch(batch)
    assert [k for k, _, _ in messages] == ["capacity"] * 2 + ["utilization"] * 5 + ["requests", "demand"]
    for kind in FACT_KINDS:
        facts = getattr(batch, kind)
        assert [key for k, key, _ in messages if k == kind] == [f.fact_id.encode() for f in facts]
        assert decode_facts(kind, [v for k, _, v in messages if k == kind]) == facts
    assert encode_batch(FactBatch()) == []
    assert decode_facts("utilization", []) == []


@pytest.mark.parametrize("kind", FACT_KINDS)
def test_none_in_every_nullable_field(kind):
    fact = MAKE[kind]()
    nulls = nullable_fields(type(fact))
    assert (kind in ("utilization", "requests", "demand", "models", "health", "health_incidents")) == bool(nulls)
    back = round_trip(kind, dataclasses.replace(fact, **{n: None for n in nulls}))
    assert all(getattr(back, n) is None for n in nulls)
    for n in nulls:  # and each alone
        round_trip(kind, dataclasses.replace(fact, **{n: None}))


def test_none_where_the_dataclass_does_not_allow_it_is_refused_naming_the_field():
    with pytest.raises(FactCodecError, match="tenant_id is None"):
        encode_fact("capacity", capacity(tenant_id=None))
    with pytest.raises(FactCodecError, match="observed_at_ms"):
        encode_fact("utilization", utilization(observed_at_ms=None))


HOSTILE = ["", "é漢字🚀", "\u202eevil\u202c", "a\x00b", "line\nbreak\r\ttab", "'; DROP TABLE capacity_facts; --",
           '{"json": "in a string"}', "\\x00\\", "\ufeffBOM", "\U0010ffff", "x" * 100_000]


@pytest.mark.parametrize("kind", FACT_KINDS)
def test_unicode_and_hostile_strings_round_trip(kind):
    fact = MAKE[kind]()
    strings = [n for n, h in hints(type(fact)).items() if h is str]
    for i, s in enumerate(HOSTILE):
        round_trip(kind, dataclasses.replace(fact, **{n: s for n in strings[i % 2::2]}))


def test_a_string_that_is_not_utf8_is_refused_naming_the_field():
    with pytest.raises(FactCodecError, match=r"pod_name is not encodable as UTF-8"):
        encode_fact("utilization", utilization(pod_name="lone \ud800 surrogate"))


def test_64_bit_values_round_trip_and_larger_ones_are_refused():
    big = utilization(fb_used_bytes=2 ** 62, energy_j=float(2 ** 62), observed_at_ms=2 ** 63 - 1, span_ms=-(2 ** 63),
                      src_offset=2 ** 63 - 1, src_partition=2 ** 31 - 1)
    back = round_trip("utilization", big)
    assert back.fb_used_bytes == 2 ** 62 and type(back.fb_used_bytes) is int and back.energy_j == 2 ** 62
    assert round_trip("utilization", utilization(energy_j=2 ** 62)).energy_j == 2.0 ** 62  # an int in a float field
    round_trip("requests", request(input_tokens=2 ** 53 - 1, output_tokens=2 ** 62))
    round_trip("capacity", capacity(valid_to_ms=2 ** 62, src_offset=2 ** 62))
    for kind, fact, field in [("utilization", utilization(fb_used_bytes=2 ** 63), "fb_used_bytes"),
                              ("utilization", utilization(src_offset=-(2 ** 63) - 1), "src_offset"),
                              ("utilization", utilization(src_partition=2 ** 31), "src_partition"),
                              ("demand", demand(instances=2 ** 31), "instances")]:
        with pytest.raises(FactCodecError, match=f"{field} = .* outside the Avro"):
            encode_fact(kind, fact)


def test_a_value_of_the_wrong_type_is_refused_not_truncated_or_converted():
    with pytest.raises(FactCodecError, match=r"observed_at_ms = 1.5 is of type float, expected int"):
        encode_fact("utilization", utilization(observed_at_ms=1.5))  # fastavro alone would write 1
    with pytest.raises(FactCodecError, match=r"power_w = '600' is of type str, expected float"):
        encode_fact("utilization", utilization(power_w="600"))  # fastavro alone would write 600.0
    with pytest.raises(FactCodecError, match=r"model = 7 is of type int, expected str"):
        encode_fact("requests", request(model=7))


# NaN and infinities: ClickHouse's Float64 / Nullable(Float64) columns (sinks/schema_sql.py) would
# take them, and one NaN turns every sum and average over the column into NaN. The domain drops
# them at the source (domain/dcgm.py, domain/bounds.py), so one reaching the wire is a bug: refused.
@pytest.mark.parametrize("kind", FACT_KINDS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_number_that_is_not_finite_is_refused_naming_the_field(kind, bad):
    fact = MAKE[kind]()
    for n in float_fields(type(fact)):
        with pytest.raises(ValueError, match=rf"{kind} fact '{fact.fact_id}': {n} is {bad!r}; .* finite or null"):
            encode_fact(kind, dataclasses.replace(fact, **{n: bad}))
        with pytest.raises(FactCodecError, match=n):
            encode_batch(FactBatch(**{kind: [fact, dataclasses.replace(fact, **{n: bad})]}))


def test_a_nan_written_by_another_producer_is_refused_on_read():
    fact = utilization(fact_id="u-nan", power_w=math.nan)
    schema = load_schema("utilization_fact", latest_version("utilization_fact"))
    buf = io.BytesIO(encode_fact("utilization", utilization())[:5])  # same framing, body by plain fastavro
    buf.seek(5)
    fastavro.schemaless_writer(buf, schema, dataclasses.asdict(fact))
    good = encode_fact("utilization", utilization())
    with pytest.raises(FactCodecError, match="power_w is nan"):
        decode_facts("utilization", [good, buf.getvalue()])
    errors = []
    assert decode_facts("utilization", [good, buf.getvalue(), good], lambda *e: errors.append(e)) == [utilization()] * 2
    assert [(i, raw) for i, raw, _ in errors] == [(1, buf.getvalue())] and "u-nan" in errors[0][2]


def test_bytes_that_are_not_a_fact_are_codec_errors_and_on_error_skips_them():
    good = encode_fact("demand", demand())
    bad = [b"", good[:3], good[:-2], b"\x01" + good[1:], good[:1] + b"\x00\x00\x00\x63" + good[5:], good + b"zz",
           b"\x00\x00\x00\x00\x01garbage", encode_fact("capacity", capacity())]
    for raw in bad:
        with pytest.raises(FactCodecError):
            decode_facts("demand", [raw])
    errors = []
    assert decode_facts("demand", [good, *bad, good], lambda *e: errors.append(e)) == [demand(), demand()]
    assert [i for i, _, _ in errors] == list(range(1, len(bad) + 1))
    assert "unknown schema version 99" in errors[4][2] and "trailing bytes" in errors[5][2]


def test_unknown_kinds_and_wrong_classes_are_refused():
    for call in (lambda: encode_fact("pods", capacity()), lambda: decode_facts("pods", []),
                 lambda: schema_name("pods")):
        with pytest.raises(FactCodecError, match="unknown fact kind 'pods'"):
            call()
    with pytest.raises(FactCodecError, match="expected a UtilizationFact, got CapacityFact"):
        encode_fact("utilization", capacity())


def test_a_fact_written_with_an_older_schema_version_is_read_into_the_current_one():
    old = json.loads((AVRO_DIR / "capacity_fact.v1.avsc").read_text())
    fact = capacity(device_id="", profile="", workload_kind="pod")  # v1 had none of these: the defaults
    buf = io.BytesIO(b"\x00\x00\x00\x00\x01")  # framed as version 1
    buf.seek(0, io.SEEK_END)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), dataclasses.asdict(fact))
    assert decode_facts("capacity", [buf.getvalue()]) == [fact]


# -- the schema covers the dataclass ----------------------------------------------------------

COLUMNS = {"capacity": CAPACITY_COLUMNS, "utilization": UTILIZATION_COLUMNS, "requests": REQUEST_COLUMNS,
           "demand": DEMAND_COLUMNS, "health": HEALTH_COLUMNS, "health_incidents": INCIDENT_COLUMNS}
COLUMNS.update(models=MODEL_COLUMNS)


@pytest.mark.parametrize("kind", FACT_KINDS)
def test_every_dataclass_field_has_a_schema_field_of_its_type(kind):
    """Add a field to a fact and not to its schema (a new ``.vN.avsc``), and this fails."""
    cls, name = FACT_CLASSES[kind], schema_name(kind)
    schema = load_schema(name, latest_version(name))
    assert schema_mismatches(cls, schema) == []
    fields = [f.name for f in dataclasses.fields(cls)]
    assert [f["name"] for f in schema["fields"]] == fields == COLUMNS[kind]  # the store's columns too
    assert getattr(FactBatch(), kind) == []


def test_the_coverage_check_catches_each_kind_of_mismatch():
    @dataclasses.dataclass(frozen=True)
    class Fact:
        fact_id: str
        count: int
        ratio: float | None
        name: str
        added: str

    schema = fastavro.parse_schema({"type": "record", "name": "F", "fields": [
        {"name": "fact_id", "type": "string"}, {"name": "count", "type": "double"},
        {"name": "ratio", "type": "double"}, {"name": "name", "type": ["null", "string"]},
        {"name": "dropped", "type": "long"}]})
    assert schema_mismatches(Fact, schema) == [
        "Fact.count: int does not fit Avro double",
        "Fact.ratio: nullable in the dataclass, not nullable in the schema",
        "Fact.name: not nullable in the dataclass, nullable in the schema",
        "Fact.added: no such field in schema F",
        "F.dropped: in the schema, not in Fact"]


def test_an_unencodable_fact_is_handed_over_and_the_rest_of_the_batch_goes_on():
    from gpuledger.streams.fact_codec import iter_encoded

    bad = utilization(fact_id="bad", fb_used_bytes=2 ** 64, src_offset=99)
    batch = FactBatch(capacity=[capacity()], utilization=[utilization(), bad])
    with pytest.raises(FactCodecError, match="fb_used_bytes"):
        list(iter_encoded(batch))  # without a handler: the error, as before
    refused = []
    out = list(iter_encoded(batch, lambda kind, fact, exc: refused.append((kind, fact.fact_id, fact.src_offset))))
    assert [k for k, _, _ in out] == ["capacity", "utilization"] and b"bad" not in [key for _, key, _ in out]
    assert refused == [("utilization", "bad", 99)]
