"""Facts in C (domain/_facts.c) against their Python references: a fact's id
(domain/facts.py ``python_fact_id``) for every kind of part, and a utilization fact
(domain/utilization.py ``python_utilization_fact``) for every mix of piece, reason, per-pod
series and value, with the same errors; the engine uses the C ones where they are built."""

from __future__ import annotations

import enum
from dataclasses import astuple
import hashlib
import random

import pytest

from gpuledger.domain import _facts, facts, samples
from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import DeviceSample
from gpuledger.domain.facts import SourcePos, python_fact_id
from gpuledger.domain.utilization import python_utilization_fact

c_fact_id = _facts.fact_id


class Tier(enum.IntEnum):
    GOLD = 3


class Label(str):
    def __str__(self) -> str:
        return "label:" + super().__str__()


class Nested:
    """A part whose str() asks for a fact id itself while the outer id is being made."""

    def __str__(self) -> str:
        return "nested-" + c_fact_id("inner", 7, "x" * 300)


class Broken:
    def __str__(self) -> str:
        raise RuntimeError("no text for this part")


EDGES = [
    "", "utilization", "GPU-1234abcd-1234-1234-1234-1234567890ab", "a\x1fb", "é", "日本語", "\U0001F600",
    "x" * 255, "y" * 256, "z" * 257, "é" * 300, 0, 1, -1, 9, 10, -10, 1764000000000, 2**63 - 1, -(2**63),
    2**63, -(2**63) - 1, 2**64, 10**40, -(10**40), None, True, False, 0.0, -0.0, 1.5, 1e300, float("nan"),
    float("inf"), -float("inf"), Tier.GOLD, Label("pod"), Nested(), (1, "a"), b"raw",
]


def test_known_value() -> None:
    expected = hashlib.sha256("utilization\x1fc1\x1fGPU-a\x1f1764000000000".encode()).hexdigest()[:32]
    assert c_fact_id("utilization", "c1", "GPU-a", 1764000000000) == expected
    assert python_fact_id("utilization", "c1", "GPU-a", 1764000000000) == expected


@pytest.mark.parametrize("part", EDGES, ids=repr)
def test_each_kind_of_part_alone_and_among_others(part) -> None:
    assert c_fact_id(part) == python_fact_id(part)
    assert c_fact_id("health", part, 5) == python_fact_id("health", part, 5)
    assert c_fact_id(part, part) == python_fact_id(part, part)


def test_no_parts_and_many_parts() -> None:
    assert c_fact_id() == python_fact_id() == hashlib.sha256(b"").hexdigest()[:32]
    many = [random.Random(1).randrange(-10**20, 10**20) for _ in range(500)]
    assert c_fact_id(*many) == python_fact_id(*many)


def test_generated_parts() -> None:
    rng = random.Random(20261203)
    alphabet = "abcXYZ019-_./:\x1f é日\U0001F680"

    def part():
        kind = rng.randrange(6)
        if kind == 0:
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 90)))
        if kind == 1:
            return rng.randrange(-(2**66), 2**66)
        if kind == 2:
            return rng.randrange(-1000, 1000)
        if kind == 3:
            return None
        if kind == 4:
            return rng.uniform(-1e6, 1e6)
        return rng.choice([True, False, Tier.GOLD, Label("ns")])

    for _ in range(5000):
        parts = [part() for _ in range(rng.randrange(0, 8))]
        assert c_fact_id(*parts) == python_fact_id(*parts), parts


@pytest.mark.parametrize("parts", [("a", "\ud800"), ("\udfff",), (Label("\ud800"),)], ids=repr)
def test_a_lone_surrogate_is_refused_by_both(parts) -> None:
    with pytest.raises(UnicodeEncodeError):
        python_fact_id(*parts)
    with pytest.raises(UnicodeEncodeError):
        c_fact_id(*parts)


def test_a_part_without_text_raises_its_own_error_in_both() -> None:
    for impl in (python_fact_id, c_fact_id):
        with pytest.raises(RuntimeError, match="no text for this part"):
            impl("utilization", Broken())
    assert c_fact_id("after", 1) == python_fact_id("after", 1)  # nothing left half-made


def test_the_domain_uses_the_built_ones() -> None:
    assert facts.fact_id is c_fact_id
    assert samples.utilization_fact is _facts.utilization_fact


def _fact_or_error(build, args) -> tuple:
    try:
        fact = build(*args)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    return ("built", type(fact), repr(vars(fact)))  # every field, in order; nan and -0.0 as written


T0 = 1_764_000_000_000


def _utilization_args(rng: random.Random) -> tuple:
    piece = None
    if rng.random() < 0.8:
        piece = Piece(T0 - 60_000, T0 + rng.choice([5_000, 60_000]), rng.choice(["f" * 32, ""]),
                      rng.choice(["allocated", "allocated", "unallocated", "unavailable", "over_allocated"]),
                      rng.choice(["acme", ""]), rng.choice(["p1", ""]), "ns", rng.choice(["pod-a", "pod-b"]),
                      rng.choice(["uid-a", ""]), rng.choice(["high", "medium", "modeled", "unattributed"]),
                      rng.choice(["", "node cordoned"]))
    s = DeviceSample(rng.choice(["GPU-a", "GPU-é"]), rng.choice([None, 3]), rng.choice([None, 0.0, -0.0, 0.5, 1.0]),
                     rng.choice([None, 0, 2**40]), rng.choice([None, 312.5]), rng.choice([None, 1.0e9]), "H100", ())
    t = T0 + rng.choice([0, 10_000])
    a = rng.choice([t, t + 2_500, t - 1])
    b = rng.choice([t + 10_000, a, a - 5])
    per_pod = {}
    if rng.random() < 0.5:
        per_pod[("ns", rng.choice(["pod-a", "pod-c"]))] = rng.choice([0.0, 0.3, 0.9, 2.5, float("nan")])
    held = {rng.choice(["uid-a", "uid-b"]): rng.choice([1, 2, 3])} if rng.random() < 0.7 else {}
    return ("cluster-1", "node-1", t, s, SourcePos("dcgm", rng.randrange(4), rng.randrange(10**6)),
            rng.choice(["GPU-a", "MIG-x", "GPU-a::1"]), a, b, piece, rng.choice(["", "", "no PodResources evidence"]),
            per_pod, held, rng.choice([1, 2, 4]))


def test_utilization_facts_agree() -> None:
    rng = random.Random(99)
    kinds = set()
    for _ in range(4000):
        args = _utilization_args(rng)
        c, py = _fact_or_error(_facts.utilization_fact, args), _fact_or_error(python_utilization_fact, args)
        assert c == py, args
        fact = python_utilization_fact(*args)
        kinds.add((fact.kind, fact.confidence, fact.reason[:12]))
    assert len(kinds) >= 12, kinds  # allocated, medium, unattributed for each reason, unknown ...


def _spoiled(args: tuple, **change) -> tuple:
    names = ["cluster_id", "node", "t", "s", "pos", "device", "a", "b", "piece", "why", "per_pod", "held", "n_targets"]
    return tuple(change.get(n, v) for n, v in zip(names, args))


class Shaped(Piece):
    pass


def test_utilization_facts_of_unexpected_arguments_are_the_references() -> None:
    """Arguments the attribution path never hands over are the reference's to build or refuse:
    the same fact or the same error."""
    args = _utilization_args(random.Random(3))
    piece = Piece(T0 - 60_000, T0 + 60_000, "f" * 32, "allocated", "acme", "p1", "ns", "pod-a", "uid-a", "high", "")
    base = _spoiled(args, piece=piece, per_pod={("ns", "pod-a"): 0.5}, held={"uid-a": 2})
    cases = [
        base, _spoiled(base, t=True), _spoiled(base, a=2**70), _spoiled(base, b=-(2**64)), _spoiled(base, t=T0 + 0.5),
        _spoiled(base, held={"uid-a": 0}), _spoiled(base, held={"uid-a": 1.5}), _spoiled(base, per_pod={("ns", "pod-a"): 1}),
        _spoiled(base, n_targets=2.0), _spoiled(base, why=None), _spoiled(base, device=Shaped), _spoiled(base, per_pod=[]),
        _spoiled(base, piece=Shaped(*astuple(piece))), _spoiled(base, pos=None), _spoiled(base, s=None),
        _spoiled(base, piece=Piece(*[*astuple(piece)][:3], 7, *[*astuple(piece)][4:])),
        _spoiled(base, piece=Piece(*[*astuple(piece)][:3], "unallocated", *[*astuple(piece)][4:10], None)),
        _spoiled(base, cluster_id="c\ud800"), _spoiled(base, device="GPU-\ud800"),
    ]
    fields = [*astuple(piece)]
    for per_pod in ({}, {("ns", "pod-a"): 0.5}):  # a pod's key looked up even where no pod has its own series
        cases += [_spoiled(base, per_pod=per_pod, piece=Piece(*fields[:6], ["ns"], *fields[7:])),
                  _spoiled(base, per_pod=per_pod, piece=Piece(*fields[:7], 7, *fields[8:]))]
    outcomes = set()
    for case in cases:
        c, py = _fact_or_error(_facts.utilization_fact, case), _fact_or_error(python_utilization_fact, case)
        assert c == py, case
        outcomes.add(c[0] if c[0] == "built" else c[1])
    assert {"built", "ZeroDivisionError", "AttributeError", "UnicodeEncodeError", "TypeError"} <= outcomes, outcomes


def _body_or_error(args) -> tuple:
    """What ``utilization_body`` gives, as the reference fact it stands for: its body is the
    writer's body of that fact; where it gives the fact instead, the fact itself."""
    from gpuledger.streams.fact_codec import encode_fact

    try:
        value, confidence = _facts.utilization_body(*args)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    reference = python_utilization_fact(*args)
    assert confidence == reference.confidence
    if type(value) is bytes:
        assert value == encode_fact("utilization", reference)[5:], args
        return ("built", type(reference), repr(vars(reference)))
    return ("built", type(value), repr(vars(value)))


def test_utilization_bodies_are_the_writers_bodies_of_the_facts() -> None:
    """With the worker's writer set, every fact the C step builds is its Avro body, byte for byte
    the body of the reference's fact; the arguments it does not take are the reference's (the
    same fact or the same error), and a value the writer refuses leaves the fact, which the
    writers then name."""
    from gpuledger.streams.fact_batches import encode_fact_bodies

    assert encode_fact_bodies()
    rng = random.Random(41)
    bodies = 0
    for _ in range(3000):
        args = _utilization_args(rng)
        assert _body_or_error(args) == _fact_or_error(python_utilization_fact, args), args
        bodies += type(_facts.utilization_body(*args)[0]) is bytes
    assert bodies > 2500
    base = _spoiled(_utilization_args(random.Random(3)), piece=None)
    for case in (_spoiled(base, s=DeviceSample("GPU-a", None, float("nan"), 1, 2.0, 3.0, "H100", ())),
                 _spoiled(base, s=DeviceSample("GPU-a", None, 0.5, 2**70, 2.0, 3.0, "H100", ())),
                 _spoiled(base, s=DeviceSample("GPU-a", None, 0.5, 1, float("inf"), 3.0, "H100", ())),
                 _spoiled(base, pos=SourcePos("dcgm", 2**40, 1)), _spoiled(base, t=True), _spoiled(base, pos=None)):
        value, _ = _facts.utilization_body(*case) if _body_or_error(case)[0] == "built" else (None, None)
        assert _body_or_error(case) == _fact_or_error(python_utilization_fact, case), case
        assert type(value) is not bytes, case  # the writer refuses a value of it, or the reference built it
