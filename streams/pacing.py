"""Event-time pacing across the partitions a worker reads.

A fetch brings whatever fits its byte limit: a partition of small records (PodResources
snapshots, watch events) hands over hours of event time in one fetch, a partition of 29-KB
DCGM scrapes minutes. Pausing a partition after the fact stops the next fetch, not the
records already delivered; processed, they become state that waits for the slower sources
(a node's allocation pieces wait for its scrapes), and that state would follow fetch sizes
instead of the read-ahead.

So a record is taken only when its event time (its Kafka timestamp = ``observed_at``) is
within ``window_ms`` of the **floor**: the earliest next event time over the paced partitions
not yet read to their end (a partition's next event time is its first parked record's, or,
when none is parked, the last one it read). A record beyond that is **parked** raw, in
order, behind any already parked for its partition, and its partition is paused; parked
records are taken as soon as the floor comes within reach. The partition holding the floor
always has its first parked record within reach, so reading never stalls. Parked records are
never taken into state nor counted in the offsets a snapshot carries: after a restart or a
rebalance they are read again from Kafka, so dropping them loses nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["NEG_INF_MS", "Pacer"]

NEG_INF_MS = -(2**62)
Key = tuple[str, int]  # (topic, partition)


class Record(Protocol):
    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def timestamp(self) -> tuple[int, int]: ...
    def value(self) -> bytes | None: ...


class Pacer:
    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.heads: dict[Key, int] = {}  # event time of the last record taken
        self.parked: dict[Key, deque[Any]] = {}
        self.paused: set[Key] = set()
        self.limit_ms = NEG_INF_MS  # floor + window as of the last pace
        self.parked_bytes = 0  # the values of the records parked

    def admit(self, record: Record) -> bool:
        """Take the record now (True), or park it behind its partition's parked ones (False)."""
        key = (record.topic(), record.partition())
        queue = self.parked.get(key)
        if queue or record.timestamp()[1] > self.limit_ms:
            if queue is None:
                queue = self.parked[key] = deque()
            queue.append(record)
            self.parked_bytes += len(record.value() or b"")
            return False
        return True

    def took(self, key: Key, event_ms: int) -> None:
        if event_ms > self.heads.get(key, NEG_INF_MS):
            self.heads[key] = event_ms

    def pace(self, live: Iterable[Key], done: Iterable[Key], take: Callable[[Any], None],
             pause: Callable[[Key], None], resume: Callable[[Key], None]) -> int:
        """Move the floor, take the parked records now within reach (``take``, in partition
        order), pause the partitions ahead and resume the others. ``live``: paced partitions
        not yet read to their end; ``done``: the rest (never paused). Returns records taken."""
        for key in done:
            if key in self.paused and not self.parked.get(key):
                self.paused.discard(key)
                resume(key)
        live = list(live)
        if not live:
            return 0
        taken, moved = 0, True
        while moved:  # taking records moves the floor: until nothing parked is within reach
            self.limit_ms = min(self._next_ms(key) for key in live) + self.window_ms
            moved = False
            for key in live:
                queue = self.parked.get(key)
                while queue and queue[0].timestamp()[1] <= self.limit_ms:
                    record = queue.popleft()
                    self.parked_bytes -= len(record.value() or b"")
                    take(record)
                    taken += 1
                    moved = True
                if queue is not None and not queue:
                    del self.parked[key]
        for key in live:
            ahead = key in self.parked or self.heads.get(key, NEG_INF_MS) > self.limit_ms
            if ahead and key not in self.paused:
                self.paused.add(key)
                pause(key)
            elif not ahead and key in self.paused:
                self.paused.discard(key)
                resume(key)
        return taken

    def forget(self, keep: Callable[[Key], bool]) -> None:
        """Drop heads, parked records and pauses of the partitions ``keep`` refuses (moved
        away, or to be read again from the offsets in state)."""
        self.heads = {k: v for k, v in self.heads.items() if keep(k)}
        self.parked = {k: v for k, v in self.parked.items() if keep(k)}
        self.paused = {k for k in self.paused if keep(k)}
        self.parked_bytes = sum(len(r.value() or b"") for q in self.parked.values() for r in q)

    def parked_records(self) -> int:
        return sum(len(q) for q in self.parked.values())

    def _next_ms(self, key: Key) -> int:
        queue = self.parked.get(key)
        return queue[0].timestamp()[1] if queue else self.heads.get(key, NEG_INF_MS)
