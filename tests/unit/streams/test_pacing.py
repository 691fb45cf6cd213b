"""Event-time pacing: whatever the fetches hand over, no record is taken more than the
window ahead of the slowest live partition, nothing is lost or reordered, and reading never
stalls (streams/pacing.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gpuledger.streams.pacing import Pacer

WINDOW_MS = 300_000


@dataclass(frozen=True)
class Rec:
    t: str
    p: int
    offset: int
    ts_ms: int

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def timestamp(self) -> tuple[int, int]:
        return (1, self.ts_ms)

    def value(self) -> bytes:
        return bytes(self.offset % 7)


class Source:
    """A partition with records every ``step_ms`` that hands over ``per_fetch`` at a time
    (a topic of small records: hours per fetch), unless paused."""

    def __init__(self, key: tuple[str, int], step_ms: int, count: int, per_fetch: int) -> None:
        self.key, self.per_fetch, self.paused, self.pos = key, per_fetch, False, 0
        self.records = [Rec(key[0], key[1], i, i * step_ms) for i in range(count)]

    def fetch(self) -> list[Rec]:
        if self.paused:
            return []
        got = self.records[self.pos:self.pos + self.per_fetch]
        self.pos += len(got)
        return got


def drive(sources: list[Source], seed: int) -> tuple[list[Rec], int]:
    """The worker's loop: fetch in random order, admit or park, pace; returns the records
    taken, in order, and the largest lead of a taken record over the slowest live partition."""
    rng, pacer = random.Random(seed), Pacer(WINDOW_MS)
    by_key = {s.key: s for s in sources}
    taken: list[Rec] = []
    done_upto = {s.key: 0 for s in sources}  # next offset taken
    worst = 0

    def take(r: Rec) -> None:
        nonlocal worst
        live = [k for k, s in by_key.items() if done_upto[k] < len(s.records)]
        floor = min(by_key[k].records[done_upto[k]].ts_ms for k in live)
        worst = max(worst, r.ts_ms - floor)
        assert r.offset == done_upto[(r.t, r.p)], "a partition's records out of order"
        done_upto[(r.t, r.p)] += 1
        pacer.took((r.t, r.p), r.ts_ms)
        taken.append(r)

    def set_paused(key, value: bool) -> None:
        by_key[key].paused = value

    for _ in range(100_000):
        order = list(sources)
        rng.shuffle(order)
        for s in order[:rng.randint(1, len(order))]:
            for r in s.fetch():
                if pacer.admit(r):
                    take(r)
        live = [k for k, s in by_key.items() if done_upto[k] < len(s.records)]
        assert pacer.parked_bytes == sum(len(r.value()) for q in pacer.parked.values() for r in q)
        if not live:
            break
        pacer.pace(live, [k for k in by_key if k not in live], take,
                   lambda k: set_paused(k, True), lambda k: set_paused(k, False))
    return taken, worst


def fleet() -> list[Source]:
    return [Source(("podresources", 0), 10_000, 3_000, 1_000),  # ~2.8 h per fetch
            Source(("dcgm", 0), 10_000, 3_000, 7),
            Source(("k8s", 0), 60_000, 500, 400),
            Source(("dcgm", 1), 9_000, 3_300, 3)]


def test_no_record_is_taken_beyond_the_window_and_none_is_lost() -> None:
    for seed in range(5):
        sources = fleet()
        taken, worst = drive(sources, seed)
        assert len(taken) == sum(len(s.records) for s in sources)
        assert len({(r.t, r.p, r.offset) for r in taken}) == len(taken)
        # the window, plus at most one record step of the partition holding the floor
        assert worst <= WINDOW_MS + 60_000, worst


def test_without_parking_the_lead_follows_the_fetch_size() -> None:
    """What parking prevents: pausing after the fact lets one fetch of small records run hours ahead."""
    sources = fleet()
    pacer = Pacer(WINDOW_MS)
    head = {s.key: -1 for s in sources}
    lead = 0
    for _ in range(50):
        for s in sources:
            for r in s.fetch():
                head[s.key] = r.ts_ms
        live = [s.key for s in sources if s.pos < len(s.records)]
        if not live:
            break
        floor = min(head[k] for k in live)
        lead = max(lead, max(head.values()) - floor)
        for s in sources:
            s.paused = head[s.key] > floor + WINDOW_MS
    assert lead > 10 * WINDOW_MS
    assert pacer.parked_records() == 0


def test_a_gap_in_the_slowest_source_does_not_stall_reading() -> None:
    """The partition holding the floor jumps hours ahead (a node silent for a while): its
    parked record holds the floor, so it is always within reach."""
    pacer = Pacer(WINDOW_MS)
    pacer.took(("dcgm", 0), 0)
    pacer.took(("pr", 0), 0)
    pacer.pace([("dcgm", 0), ("pr", 0)], [], lambda r: None, lambda k: None, lambda k: None)
    late = Rec("dcgm", 0, 1, 7_200_000)
    assert not pacer.admit(late)
    taken: list[Rec] = []
    pacer.pace([("dcgm", 0), ("pr", 0)], [], taken.append, lambda k: None, lambda k: None)
    assert taken == []  # pr's head (0) is the floor: dcgm waits
    pacer.took(("pr", 0), 7_000_000)
    pacer.pace([("dcgm", 0), ("pr", 0)], [], taken.append, lambda k: None, lambda k: None)
    assert taken == [late]


def test_forgotten_partitions_lose_their_parked_records() -> None:
    pacer = Pacer(WINDOW_MS)
    assert not pacer.admit(Rec("dcgm", 3, 0, 10))  # nothing paced yet: parked
    assert pacer.parked_records() == 1
    pacer.forget(lambda k: k != ("dcgm", 3))
    assert pacer.parked_records() == 0 and not pacer.paused
