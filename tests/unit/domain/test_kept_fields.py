"""The utilization facts in C keep what they read of a piece and of a source position for the
facts after (domain/_facts.c): the pieces met last and the last position, each held while it
is kept. A fact is the reference's whichever pieces and positions came before it, however
they map onto the kept slots, and whatever Python runs while it is built."""

from __future__ import annotations

import dataclasses
import random

import pytest

from gpuledger.domain import _facts
from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import DeviceSample
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.utilization import python_utilization_fact

T0 = 1_764_000_000_000
SAMPLE = DeviceSample("GPU-a", None, 0.5, 2**30, 300.0, 1e9, "H100", ())


def _piece(i: int, kind: str = "allocated", confidence: str = "high") -> Piece:
    return Piece(T0 - 60_000, T0 + 60_000, f"{i:032x}", kind, f"tenant-{i}", f"p{i % 3}", f"ns-{i % 5}",
                 f"pod-{i}", f"uid-{i}", confidence, "" if i % 2 else f"reason {i}")


def _args(piece, pos, cluster="c1") -> tuple:
    return (cluster, "node-1", T0, SAMPLE, pos, "GPU-a", T0, T0 + 10_000, piece, "", {}, {}, 1)


def _both(args) -> tuple[dict, dict]:
    return vars(_facts.utilization_fact(*args)), vars(python_utilization_fact(*args))


def test_facts_of_many_pieces_and_positions_in_any_order_are_the_references():
    rng = random.Random(41)
    pieces = [_piece(i, rng.choice(["allocated", "allocated", "unallocated"]), rng.choice(["high", "unattributed"]))
              for i in range(1_500)]  # more than the slots: pieces meet in a slot, and come back
    positions = [SourcePos("dcgm", i % 4, i) for i in range(40)]
    tenants = set()
    for _ in range(6_000):
        c, py = _both(_args(rng.choice(pieces), rng.choice(positions)))
        assert c == py
        tenants.add(c["tenant_id"])
    assert len(tenants) > 1_000


def test_a_position_of_another_class_is_read_as_it_answers():
    class Moving(SourcePos):  # not the class kept: read each time
        pass

    pos = Moving("dcgm", 1, 7)
    assert _both(_args(_piece(1), pos))[0]["src_offset"] == 7
    object.__setattr__(pos, "offset", 8)
    c, py = _both(_args(_piece(1), pos))
    assert c == py and c["src_offset"] == 8


def test_a_piece_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _piece(1).tenant_id = "another"


def test_python_run_while_a_fact_is_built_may_replace_every_kept_piece():
    """A cluster id whose str() makes facts of 1,000 other pieces (every slot replaced) while
    the fact is built: the fact still holds what its own piece said."""
    others = [_piece(i) for i in range(2, 1_002)]

    class Cluster:
        def __str__(self) -> str:
            for p in others:
                _facts.utilization_fact(*_args(p, SourcePos("dcgm", 0, 1)))
            return "c1"

    piece = _piece(1)
    for _ in range(3):
        c, py = _both(_args(piece, SourcePos("dcgm", 2, 3), Cluster()))
        assert c == py and c["tenant_id"] == "tenant-1" and c["pod_uid"] == "uid-1"
