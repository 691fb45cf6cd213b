"""Capacity facts in C (domain/_capacity_fact.c ``capacity_fact``) against their Python
reference (domain/capacity.py ``python_make_fact``): the same device id, fact and piece, field
by field and in order, or the same error, over generated arguments (owners of pods and of
vGPU VMs, partial owners, no owner, an owner field of its own, hostile strings, integers past
64 bits, odd types) and the reference's answer for owners the C code leaves to it."""

from __future__ import annotations

import dataclasses
import random

import pytest

from gpuledger.domain import _facts, capacity
from gpuledger.domain.capacity import Segment, python_make_fact
from gpuledger.domain.facts import SourcePos

OWNER_KEYS = list(capacity._NO_OWNER)
STRINGS = ["", "a", "é", "\x1f", "ns/pod", "GPU-0000-1111", "\U0001F600"]


def _outcome(build, args) -> tuple:
    try:
        device, fact, piece = build(*args)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    return ("built", device, type(fact), list(vars(fact).items()), type(piece), _slots(piece))


def _slots(piece) -> tuple:
    """A piece's fields in its dataclass's order, and its __dict__ where it has one (a Piece keeps
    its fields in slots)."""
    return [(f.name, getattr(piece, f.name)) for f in dataclasses.fields(piece)], getattr(piece, "__dict__", None)


def _owner(rng: random.Random):
    choice = rng.randrange(5)
    if choice == 0:
        return None
    if choice == 1:
        return {}
    keys = rng.sample(OWNER_KEYS, rng.randrange(1, len(OWNER_KEYS) + 1))
    owner = {k: rng.choice(STRINGS) for k in keys}
    if choice == 2 or "workload_kind" in owner and rng.random() < 0.5:
        owner["workload_kind"] = rng.choice(["vm", "pod", "VM", ""])
    return owner


def _args(rng: random.Random) -> tuple:
    a = rng.choice([0, 1_764_000_000_000, -5, 2**63 - 1, 2**70])
    seg = Segment(rng.choice(["c1", "c\x1f2", ""]), rng.choice(["node-1", "é"]), a, a + 60_000,
                  SourcePos(rng.choice(["podresources", "vgpu"]), rng.randrange(8), rng.choice([0, 7, 2**40])))
    return (seg, rng.choice(STRINGS), rng.choice(STRINGS), rng.choice(["H100", "unknown"]),
            rng.choice(["exclusive", "mig", "timeslice", "vgpu"]), rng.choice(["", "1g.10gb"]),
            rng.choice([1.0, 0.5, 1 / 7, 0.0, 2]), a, rng.choice([a + 10_000, a, None, "b"]),
            rng.choice(["allocated", "unallocated", "unavailable", "outside_inventory"]), _owner(rng),
            rng.choice(["high", "medium", "modeled", "unattributed", ""]), rng.choice(STRINGS))


def test_the_domain_uses_the_built_one() -> None:
    assert capacity.make_fact is _facts.capacity_fact


def test_generated_arguments_agree() -> None:
    rng = random.Random(17)
    vm = 0
    for _ in range(3000):
        args = _args(rng)
        c, py = _outcome(_facts.capacity_fact, args), _outcome(python_make_fact, args)
        assert c == py, args
        vm += bool(args[10] and args[10].get("workload_kind") == "vm")
    assert vm > 200  # a VM owner's id hashes its tenant: both agree on it


@pytest.mark.parametrize("spoil", ["an owner field of its own", "owner a list", "owner a dict subclass", "seg without pos",
                                   "too few arguments", "an owner value that cannot be hashed"])
def test_arguments_the_path_never_makes_are_the_references(spoil: str) -> None:
    args = list(_args(random.Random(3)))
    if spoil == "an owner field of its own":
        args[10] = {"tenant_id": "t", "vm_name": "x"}
    elif spoil == "owner a list":
        args[10] = [("tenant_id", "t")]
    elif spoil == "owner a dict subclass":
        args[10] = type("Owner", (dict,), {})(tenant_id="t")
    elif spoil == "seg without pos":
        args[0] = (args[0].cluster_id, args[0].node)
    elif spoil == "too few arguments":
        args = args[:-1]
    elif spoil == "an owner value that cannot be hashed":
        args[10] = {"pod_uid": "\ud800"}  # a lone surrogate: its UTF-8 cannot be made
    assert _outcome(_facts.capacity_fact, args) == _outcome(python_make_fact, args)
