"""One node's (or vGPU host's) evidence timeline: snapshots become segments, scrapes wait.

A node's consecutive snapshots at ``t_i`` and ``t_i+1`` make a segment ``[t_i, t_i+1)`` held
by whoever snapshot ``i`` named, when the interval is within the node's staleness limit
(``domain/cadence.py``). A later snapshot makes ``[t_i, t_i + cadence)`` a segment and the
rest a gap in evidence. A snapshot that ends its node's inventory (every GPU of the node
leaves it within one cadence) stands for one cadence, never past the inventory's end, and
later snapshots before that are stale. A node whose snapshots stop (the watermark passes the
limit) has its last segment closed the same way.

Queued entries are ``[start, end, holders, pos, gap]``: a gap keeps the holders before it, so
a late snapshot can fill it. They leave the queue a capacity window at a time (the entries
starting in one aligned window, ``domain/capacity.py``), once a snapshot past the window
came. All times are epoch ms; intervals half-open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuledger.domain.cadence import Cadence, sample_end_ms
from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import row_of, sample_of

__all__ = ["NEG_INF", "POS_INF", "NodeState", "node_from", "node_state", "state_of"]

NEG_INF = -(2**62)
POS_INF = 2**62


@dataclass
class NodeState:
    last_ms: int | None = None
    last_holders: dict = field(default_factory=dict)
    last_pos: tuple = ("", 0, 0)
    open: bool = False  # the last snapshot's segment waits for the next snapshot
    closed_until_ms: int = NEG_INF  # snapshots before this are stale (the node left the inventory)
    pending_segments: list = field(default_factory=list)  # [start, end, holders, pos, gap]
    final_until_ms: int = NEG_INF
    first_snapshot_ms: int | None = None
    gaps: list = field(default_factory=list)  # [start, end] without evidence
    evidence_gaps: list = field(default_factory=list)  # [start, end, holders before, pos]: a late snapshot may fill
    pieces: dict = field(default_factory=dict)  # device id -> list[Piece] sorted by start
    pending_scrapes: list = field(default_factory=list)  # [t, rows, pos, end or None]
    dcgm_wm_ms: int = NEG_INF  # latest scrape time applied (a node's scrapes arrive in order)
    dcgm_open: bool = False  # the latest scrape's end waits for the next scrape
    dcgm_closed_until_ms: int = NEG_INF  # scrapes before this come after the node left the inventory
    snapshot_cadence: Cadence = field(default_factory=Cadence)
    scrape_cadence: Cadence = field(default_factory=Cadence)
    # no device's first piece ends before this (a bound, not state): pruning the pieces at a
    # horizon not past it drops nothing, so it need not look (domain/samples.py ``_prune``)
    pieces_floor_ms: int = field(default=NEG_INF, compare=False, repr=False)

    # -- snapshots -------------------------------------------------------------------
    def take_snapshot(self, holders: dict, t_ms: int, pos: tuple, ceiling_ms: int, node_end_ms: int | None) -> None:
        """A snapshot newer than the latest: queue what the previous one stands for."""
        if self.last_ms is None:
            self.first_snapshot_ms = self.final_until_ms = t_ms
        elif self.open:
            end = self.snapshot_cadence.step(self.last_ms, t_ms, ceiling_ms)
            self._queue(self.last_ms, end, t_ms, self.last_holders, self.last_pos)
        else:  # resumed after it stopped (or left the inventory): a gap since
            start = self.pending_segments[-1][1] if self.pending_segments else self.final_until_ms
            self._queue(start, start, t_ms, self.last_holders, self.last_pos)
        self.last_ms, self.last_holders, self.last_pos, self.open = t_ms, holders, tuple(pos), True
        median = None if node_end_ms is None else self.snapshot_cadence.median_ms()
        if node_end_ms is not None and median is not None and t_ms < node_end_ms <= t_ms + median:
            end = min(t_ms + median, node_end_ms)
            self._queue(t_ms, end, end, holders, tuple(pos))
            self.open, self.closed_until_ms = False, t_ms + median

    def stop_if_silent(self, watermark_ms: int, ceiling_ms: int) -> None:
        """Close the open segment once the watermark shows the snapshots stopped."""
        if self.open and self.last_ms is not None and \
                self.last_ms + self.snapshot_cadence.stale_after_ms(ceiling_ms) <= watermark_ms:
            end = sample_end_ms(self.snapshot_cadence, self.last_ms, None, ceiling_ms)
            self._queue(self.last_ms, end, end, self.last_holders, self.last_pos)
            self.open = False

    def _queue(self, a: int, end: int, b: int, holders: dict, pos) -> None:
        if end > a:
            self.pending_segments.append([a, end, holders, list(pos), False])
        if b > end:
            self.pending_segments.append([end, b, holders, list(pos), True])

    def split_pending(self, t_ms: int, holders: dict, pos: list, ceiling_ms: int) -> bool:
        """A late snapshot inside a queued segment or gap splits it."""
        for i, (a, b, h, p, gap) in enumerate(self.pending_segments):
            if a < t_ms < b or (gap and a == t_ms):  # at a gap's start: the snapshot that came late
                self.pending_segments[i:i + 1] = self.bridge(a, t_ms, h, p, gap, ceiling_ms) + \
                    self.bridge(t_ms, b, holders, pos, False, ceiling_ms)
                return True
        return False

    def bridge(self, a: int, b: int, holders: dict, pos, gap: bool, ceiling_ms: int) -> list[list]:
        """Entries for ``[a, b)`` from a snapshot at ``a`` (``gap``: ``a`` starts a gap, the
        snapshot came a cadence before it) and the next evidence at ``b``."""
        if gap:
            end = b if b - a <= self.snapshot_cadence.stale_after_ms(ceiling_ms) else a
        else:
            end = sample_end_ms(self.snapshot_cadence, a, b, ceiling_ms)
        out = [[a, end, holders, list(pos), False]] if end > a else []
        return out + ([[end, b, holders, list(pos), True]] if b > end else [])

    # -- scrapes ----------------------------------------------------------------------
    def scrape_end(self, t_ms: int, ceiling_ms: int) -> tuple[int, int] | None:
        """A scrape at ``t_ms`` arrived: (time of the previous scrape, where it stops standing)."""
        if not self.dcgm_open or self.dcgm_wm_ms == NEG_INF:
            return None
        return self.dcgm_wm_ms, self.scrape_cadence.step(self.dcgm_wm_ms, t_ms, ceiling_ms)

    def scrape_silent_end(self, watermark_ms: int, ceiling_ms: int) -> tuple[int, int] | None:
        """The latest scrape's end once the watermark shows the scrapes stopped."""
        if self.dcgm_open and self.dcgm_wm_ms + self.scrape_cadence.stale_after_ms(ceiling_ms) <= watermark_ms:
            self.dcgm_open = False
            return self.dcgm_wm_ms, sample_end_ms(self.scrape_cadence, self.dcgm_wm_ms, None, ceiling_ms)
        return None

    def set_scrape_end(self, t_ms: int, end_ms: int) -> None:
        for scrape in reversed(self.pending_scrapes):
            if scrape[0] == t_ms:
                scrape[3] = end_ms
                return


def state_of(states: dict[str, NodeState], name: str) -> NodeState:
    """A node's (or host's) state, made the first time it is named (not once per record)."""
    st = states.get(name)
    if st is None:
        st = states[name] = NodeState()
    return st


def node_state(s: NodeState) -> dict:
    return {
        "last_ms": s.last_ms, "last_holders": s.last_holders, "last_pos": list(s.last_pos), "open": s.open,
        "closed_until_ms": s.closed_until_ms, "pending_segments": s.pending_segments,
        "final_until_ms": s.final_until_ms, "first_snapshot_ms": s.first_snapshot_ms, "gaps": s.gaps,
        "evidence_gaps": s.evidence_gaps,
        "pieces": s.pieces,  # dataclasses: serialized as objects by the store's JSON encoder
        "pending_scrapes": [[t, [row_of(x) for x in samples], *rest] for t, samples, *rest in s.pending_scrapes],
        "dcgm_wm_ms": s.dcgm_wm_ms, "dcgm_open": s.dcgm_open,
        "dcgm_closed_until_ms": s.dcgm_closed_until_ms,
        "snapshot_cadence": s.snapshot_cadence.intervals_ms, "scrape_cadence": s.scrape_cadence.intervals_ms,
    }


def _holders(h: dict) -> dict:
    return {k: tuple(v) for k, v in h.items()}


def node_from(s: dict) -> NodeState:
    return NodeState(
        last_ms=s["last_ms"], last_holders=_holders(s["last_holders"]), last_pos=tuple(s["last_pos"]),
        open=s.get("open", s["last_ms"] is not None), closed_until_ms=s.get("closed_until_ms", NEG_INF),
        pending_segments=[[a, b, _holders(h), p, *(rest or [False])] for a, b, h, p, *rest in s["pending_segments"]],
        final_until_ms=s["final_until_ms"], first_snapshot_ms=s["first_snapshot_ms"], gaps=s["gaps"],
        evidence_gaps=[[a, b, _holders(h), p] for a, b, h, p in s.get("evidence_gaps", [])],
        pieces={d: [Piece(**p) for p in ps] for d, ps in s["pieces"].items()},  # from the stored JSON
        pending_scrapes=[[t, [sample_of(r) for r in rows], *[*rest, None][:2]]
                         for t, rows, *rest in s["pending_scrapes"]],
        dcgm_wm_ms=s["dcgm_wm_ms"],
        dcgm_open=s.get("dcgm_open", s["dcgm_wm_ms"] != NEG_INF),
        dcgm_closed_until_ms=s.get("dcgm_closed_until_ms", NEG_INF),
        snapshot_cadence=Cadence(list(s.get("snapshot_cadence", []))),
        scrape_cadence=Cadence(list(s.get("scrape_cadence", []))))
