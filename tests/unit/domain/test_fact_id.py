"""A fact's id in C (domain/_fact_id.c) against its Python reference (domain/facts.py
``python_fact_id``): the same ids for every kind of part, the same errors, and the engine's
facts name themselves with the C one where it is built."""

from __future__ import annotations

import enum
import hashlib
import random

import pytest

from gpuledger.domain import _fact_id, facts
from gpuledger.domain.facts import python_fact_id

c_fact_id = _fact_id.fact_id


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


def test_the_domain_uses_the_built_one() -> None:
    assert facts.fact_id is c_fact_id
