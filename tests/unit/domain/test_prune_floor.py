"""A node's pieces are pruned as before when ``_prune`` skips its walk under the pieces' floor
(``NodeState.pieces_floor_ms``): generated runs of pieces emitted (appended, or landing in the
past as a filled gap does), scrapes queued and attributed, and horizons moving, checked after
every step against the walk over every device."""

import random

from gpuledger.domain.attribution import Attributor
from gpuledger.domain.capacity import Piece
from gpuledger.domain.samples import drop_before
from gpuledger.domain.segments import NodeState

GRACE_MS = 120_000


def _piece(start: int, end: int) -> Piece:
    return Piece(start, end, f"f{start}-{end}", "allocated", "t", "p", "ns", "pod", "uid", "high", "")


def _reference_prune(pieces: dict, horizon: int) -> None:
    for ps in pieces.values():
        drop_before(ps, horizon)


def _horizon(st: NodeState) -> int:
    oldest = st.pending_scrapes[0][0] if st.pending_scrapes else st.dcgm_wm_ms
    return min(oldest, st.dcgm_wm_ms) - GRACE_MS


def test_pruning_under_the_floor_keeps_what_the_walk_over_every_device_keeps():
    rng = random.Random(7)
    skipped = 0
    for _ in range(300):
        att = Attributor("c1", 300_000, GRACE_MS)
        st = NodeState()
        reference: dict[str, list[Piece]] = {}
        t = rng.randrange(0, 10**6)
        st.dcgm_wm_ms = t
        for _ in range(rng.randrange(1, 60)):
            op = rng.random()
            if op < 0.45:  # a capacity fact: after the others, or back in the past (a filled gap)
                device = f"GPU-{rng.randrange(4)}"
                start = rng.randrange(t - 600_000, t + 120_000) if rng.random() < 0.2 else t + rng.randrange(0, 60_000)
                end = start + rng.randrange(1, 180_000)
                piece = _piece(start, end)
                att._emit_capacity(st, [(device, piece, piece)])
                att._capacity_out.clear()
                ref = reference.setdefault(device, [])
                ref.append(piece)
                ref.sort(key=lambda p: p.start_ms)
            elif op < 0.8:  # scrapes come: the horizon may move
                t += rng.randrange(0, 90_000)
                st.dcgm_wm_ms = t
                st.pending_scrapes.append([t, [], ["dcgm", 0, 0], None])
            else:  # the oldest scrapes are done with
                del st.pending_scrapes[:rng.randrange(0, len(st.pending_scrapes) + 1)]
            before = st.pieces_floor_ms
            horizon = _horizon(st)
            att._prune(st)
            _reference_prune(reference, horizon)
            skipped += horizon <= before
            assert {d: ps for d, ps in st.pieces.items()} == reference
            firsts = [ps[0].end_ms for ps in st.pieces.values() if ps]
            assert all(st.pieces_floor_ms <= e for e in firsts)
    assert skipped > 1000  # the walk was skipped often, so the comparison covers the skip


def test_a_piece_ending_just_before_the_horizon_goes_and_one_ending_at_it_stays():
    att = Attributor("c1", 300_000, GRACE_MS)
    st = NodeState()
    a, b = _piece(0, 1_000_000), _piece(0, 1_000_001)
    att._emit_capacity(st, [("GPU-a", a, a), ("GPU-b", b, b)])
    st.dcgm_wm_ms = 1_000_000 + GRACE_MS  # horizon 1,000,000: a piece ending there is still needed
    att._prune(st)
    assert st.pieces == {"GPU-a": [a], "GPU-b": [b]} and st.pieces_floor_ms == 1_000_000
    st.dcgm_wm_ms += 1
    att._prune(st)
    assert st.pieces == {"GPU-a": [], "GPU-b": [b]} and st.pieces_floor_ms == 1_000_001
    st.dcgm_wm_ms += 1
    att._prune(st)
    assert st.pieces == {"GPU-a": [], "GPU-b": []}
