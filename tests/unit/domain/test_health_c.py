"""A scrape's health facts in C (domain/_health.c ``health_rows``) against their Python
reference (domain/gpu_health.py ``python_health_rows``): the same facts, field by field and in
the same order, over the reference scrapes and generated device sets (MIG instances, devices
of one UUID and instance that differ only in their other labels, hostile values), and the
reference's answer for arguments the parse never makes. The bodies a worker writes
(``health_bodies``) are the writer's bodies of those facts, and the health fold sees every fact
that changes it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuledger.domain import _health, gpu_health
from gpuledger.domain.dcgm import HealthDevice, parse_exposition
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.gpu_health import GpuHealthFact, health_facts, python_health_rows

REFERENCE = Path(__file__).resolve().parents[4] / "shared" / "reference" / "dcgm"
T0 = 1_764_000_000_000
FIELDS = list(GpuHealthFact.__dataclass_fields__)
VALUE_FIELDS = [f for f in FIELDS[9:-3]]


def _base(cluster: str = "cluster-1", t: int = T0) -> dict:
    return {"fact_id": "", "cluster_id": cluster, "node": "node-1", "gpu_uuid": "", "gpu_instance_id": None,
            "profile": "", "model": "", "pci_bus_id": "", "observed_at_ms": t, **dict.fromkeys(VALUE_FIELDS),
            "src_topic": "dcgm", "src_partition": 2, "src_offset": 99}


def _outcome(build, args) -> tuple:
    try:
        facts = build(*args)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    return ("built", [(type(f), repr(vars(f)), list(vars(f))) for f in facts])


def test_the_domain_uses_the_built_one() -> None:
    assert gpu_health.health_rows is _health.health_rows


@pytest.mark.parametrize("name", ["dcgm-metrics-k8s-h100.txt", "dcgm-metrics-mig-a100.txt",
                                  "dcgm-metrics-vgpu-guest-grid-a100-40c.txt"])
def test_reference_scrapes_agree(name: str) -> None:
    parsed = parse_exposition((REFERENCE / name).read_text())
    args = (parsed.health, _base(), "cluster-1", T0)
    c, py = _outcome(_health.health_rows, args), _outcome(python_health_rows, args)
    assert c == py
    assert len(c[1]) == len(parsed.health)
    facts = health_facts("cluster-1", "node-1", T0, parsed, SourcePos("dcgm", 2, 99))
    assert [list(vars(f)) for f in facts] == [FIELDS] * len(facts)  # every field, in the fact's order


def _device_set(rng: random.Random) -> dict:
    out = {}
    for _ in range(rng.choice([0, 1, 2, 8, 17])):
        # UUIDs of each width of str, one a prefix of another; instances past 64 bits now and then
        uuid = rng.choice(["GPU-b", "GPU-a", "GPU-ab", "GPU-A", "GPU-c", "GPU-é", "GPU-Ω", "GPU-\U0001F600", ""])
        instance = rng.choice([None, None, 0, 1, 7, -1, 2**62, -(2**63)] * 8 + [2**70])
        device = HealthDevice(uuid, instance, rng.choice(["", "1g.10gb"]),
                              rng.choice(["NVIDIA H100 80GB HBM3", ""]), rng.choice(["00000000:19:00.0", ""]))
        out[device] = {f: rng.choice([0, 1, 2**62, 48.5, 0.0]) for f in rng.sample(VALUE_FIELDS, rng.randrange(4))}
    return out


def test_generated_device_sets_agree() -> None:
    rng = random.Random(21)
    ties = 0
    referred = []  # the sets the C module hands to the reference (an instance past 64 bits)
    _health.setup(lambda *a: referred.append(a) or python_health_rows(*a), GpuHealthFact, HealthDevice,
                  gpu_health.fact_id)
    try:
        for _ in range(3000):
            health = _device_set(rng)
            args = (health, _base(rng.choice(["cluster-1", "c\x1f2"]), T0 + rng.randrange(10**6)),
                    "cluster-1", T0 + rng.randrange(3))
            c, py = _outcome(_health.health_rows, args), _outcome(python_health_rows, args)
            assert c == py, health
            keys = [(d.gpu_uuid, -1 if d.gpu_instance_id is None else d.gpu_instance_id) for d in health]
            ties += len(keys) - len(set(keys))
    finally:
        _health.setup(python_health_rows, GpuHealthFact, HealthDevice, gpu_health.fact_id)
    assert ties > 100  # devices that sort equal keep the mapping's order: both agree on it
    assert 100 < len(referred) < 1500  # most sets sorted in C, some left to the reference


@pytest.mark.parametrize("spoil", ["device a plain tuple", "device too short", "uuid an int", "instance a float",
                                   "instance a bool", "fields a list", "health a list", "base a list", "no args"])
def test_arguments_the_parse_never_makes_are_the_references(spoil: str) -> None:
    device = HealthDevice("GPU-a", None, "", "H100", "0000")
    health: object = {device: {"xid_last": 0}, HealthDevice("GPU-a", 1, "", "H100", "0000"): {"gpu_temp_c": 40.0}}
    base: object = _base()
    if spoil == "device a plain tuple":
        health = {("GPU-a", None, "", "H100", "0000"): {"xid_last": 0}}
    elif spoil == "device too short":
        health = {("GPU-a", None): {"xid_last": 0}}
    elif spoil == "uuid an int":
        health = {HealthDevice(7, None, "", "H100", "0000"): {}}
    elif spoil == "instance a float":
        health = {HealthDevice("GPU-a", 1.5, "", "H100", "0000"): {}, device: {}}
    elif spoil == "instance a bool":
        health = {HealthDevice("GPU-a", True, "", "H100", "0000"): {}, device: {}}
    elif spoil == "fields a list":
        health = {device: [("xid_last", 3)]}
    elif spoil == "health a list":
        health = [device]
    elif spoil == "base a list":
        base = list(_base().items())
    args = () if spoil == "no args" else (health, base, "cluster-1", T0)
    assert _outcome(_health.health_rows, args) == _outcome(python_health_rows, args)


# -- bodies: what a worker writes (streams/fact_batches.py encode_fact_bodies)
def _fold_inputs(rng: random.Random) -> dict:
    """Fields that move the health fold now and then: mostly repeats of a few values."""
    out = {f: rng.choice([0, 0, 0, 1, 3]) for f in rng.sample(INCIDENT_FIELDS, rng.randrange(len(INCIDENT_FIELDS) + 1))}
    if rng.random() < 0.7:
        out["clock_event_reasons"] = rng.choice([0, 0, 0, 0x1, 0x4, 0x20, 0x40, 0x88, 2**62])
    if rng.random() < 0.5:
        out["gpu_temp_c"] = rng.choice([40.0, 41.5])
    return out


INCIDENT_FIELDS = ["xid_last", "ecc_dbe_volatile_total", "ecc_dbe_aggregate_total", "row_remap_failure",
                   "remapped_rows_uncorrectable"]


def _scrapes(rng: random.Random, n: int) -> list[tuple[int, dict]]:
    """A node's scrapes: a fixed set of devices (a GPU, its MIG instances), each scrape's fields
    mostly those of the one before."""
    devices = [HealthDevice("GPU-a", None, "", "H100", "0000"), HealthDevice("GPU-a", 1, "1g.10gb", "H100", "0000"),
               HealthDevice("GPU-b", None, "", "H100", "0001")]
    fields = {d: _fold_inputs(rng) for d in devices}
    out = []
    for i in range(n):
        for d in devices:
            if rng.random() < 0.2:
                fields[d] = _fold_inputs(rng)
        present = [d for d in devices if rng.random() < 0.95]
        out.append((T0 + 10_000 * i + rng.randrange(2), {d: dict(fields[d]) for d in present}))
    return out


def test_bodies_are_the_writers_bodies_of_the_facts_and_the_fold_sees_what_it_must() -> None:
    """A node's scrapes through ``HealthFold.scrape`` with and without bodies: every item is the
    writer's body of the fact made without them, and the fold ends with the same incidents,
    state and quiet devices, having been handed only the facts that change it (fewer than all)."""
    from gpuledger.domain.dcgm import DcgmParse
    from gpuledger.domain.gpu_incidents import HealthFold
    from gpuledger.streams.fact_batches import encode_fact_bodies
    from gpuledger.streams.fact_codec import encode_fact

    assert encode_fact_bodies()
    rng = random.Random(5)
    pos = SourcePos("dcgm", 2, 99)
    folded = total = 0
    for _ in range(40):
        plain, bodies = HealthFold(), HealthFold()
        seen = []
        original = bodies.observe
        bodies.observe = lambda f: seen.append(f) or original(f)
        for t, health in _scrapes(rng, 60):
            parsed = DcgmParse([], 0, {}, health)
            facts, incidents = plain.scrape("cluster-1", "node-1", t, parsed, pos)
            items, incidents_b = bodies.scrape("cluster-1", "node-1", t, parsed, pos, encoded=True)
            assert [type(i) for i in items] == [bytes] * len(facts)
            assert items == [encode_fact("health", f)[5:] for f in facts]
            assert incidents_b == incidents
            total += len(facts)
        assert bodies.state == plain.state and bodies._quiet == plain._quiet
        folded += len(seen)
    assert 0.05 * total < folded < 0.8 * total, (folded, total)


def test_a_value_the_writer_refuses_stays_a_fact_and_other_fields_leave_it_to_the_caller() -> None:
    from gpuledger.domain.dcgm import DcgmParse
    from gpuledger.domain.gpu_health import health_bodies
    from gpuledger.streams.fact_batches import encode_fact_bodies

    assert encode_fact_bodies()
    pos = SourcePos("dcgm", 2, 99)
    a, b = HealthDevice("GPU-a", None, "", "H100", "0000"), HealthDevice("GPU-b", None, "", "H100", "0001")
    items, loud = health_bodies("c", "n", T0, DcgmParse([], 0, {}, {a: {"xid_last": 2**70}, b: {"xid_last": 3}}), pos,
                                {})
    assert type(items[0]) is GpuHealthFact and items[0].xid_last == 2**70 and type(items[1]) is bytes
    assert [f.gpu_uuid for f in loud] == ["GPU-a", "GPU-b"]  # nothing quiet in an empty fold
    reference = health_facts("c", "n", T0, DcgmParse([], 0, {}, {a: {"xid_last": 2**70}, b: {"xid_last": 3}}), pos)
    for made in (items[:1], loud):  # the facts built here are health_rows' facts, field for field and in order
        assert [list(vars(f).items()) for f in made] == [list(vars(f).items()) for f in reference[:len(made)]]
    assert health_bodies("c", "n", T0, DcgmParse([], 0, {}, {a: {"not_a_field": 1}}), pos, {}) is None
    quiet = {("GPU-b", None): (3, None, None, None, None, None)}
    _, loud = health_bodies("c", "n", T0, DcgmParse([], 0, {}, {b: {"xid_last": 3}}), pos, quiet)
    assert loud == []
    _, loud = health_bodies("c", "n", T0, DcgmParse([], 0, {}, {b: {"xid_last": 3, "clock_event_reasons": 0}}), pos,
                            quiet)
    assert len(loud) == 1  # bits 0 is not "no field"


def test_the_writer_is_taken_only_for_a_schema_of_the_facts_fields_in_their_order() -> None:
    from gpuledger.streams.fact_batches import _WRITERS, _body_of, encode_fact_bodies

    program, names = _WRITERS["health"].bodies.args[:2]
    assert names == tuple(FIELDS)
    shuffled = (names[1], names[0], *names[2:])
    assert _health.set_body_writer(_body_of, program, names, shuffled) is False
    assert _health.set_body_writer(_body_of, program[:-2], names[:-1], tuple(FIELDS[:-1])) is False  # no src_offset
    assert encode_fact_bodies()
