"""A scrape's health facts in C (domain/_health.c ``health_rows``) against their Python
reference (domain/gpu_health.py ``python_health_rows``): the same facts, field by field and in
the same order, over the reference scrapes and generated device sets (MIG instances, devices
of one UUID and instance that differ only in their other labels, hostile values), and the
reference's answer for arguments the parse never makes."""

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
        uuid = rng.choice(["GPU-b", "GPU-a", "GPU-c", "GPU-é", ""])
        device = HealthDevice(uuid, rng.choice([None, None, 0, 1, 7, -1, 2**70]), rng.choice(["", "1g.10gb"]),
                              rng.choice(["NVIDIA H100 80GB HBM3", ""]), rng.choice(["00000000:19:00.0", ""]))
        out[device] = {f: rng.choice([0, 1, 2**62, 48.5, 0.0]) for f in rng.sample(VALUE_FIELDS, rng.randrange(4))}
    return out


def test_generated_device_sets_agree() -> None:
    rng = random.Random(21)
    ties = 0
    for _ in range(3000):
        health = _device_set(rng)
        args = (health, _base(rng.choice(["cluster-1", "c\x1f2"]), T0 + rng.randrange(10**6)),
                "cluster-1", T0 + rng.randrange(3))
        c, py = _outcome(_health.health_rows, args), _outcome(python_health_rows, args)
        assert c == py, health
        keys = [(d.gpu_uuid, -1 if d.gpu_instance_id is None else d.gpu_instance_id) for d in health]
        ties += len(keys) - len(set(keys))
    assert ties > 100  # devices that sort equal keep the mapping's order: both agree on it


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
