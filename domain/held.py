"""Held intervals (pure): a tenant's allocated capacity on one device, as the showback prices it.

A row is ``(tenant, class, sku, from_ms, to_ms, GPU-equivalents, confidence, pod_uid,
covered_share, device)``. Two rows of the same device whose every other field but the times
is equal, and where one ends as the next starts, are the same holding: joined, they add up to
the same GPU-hours at every instant, the same covered hours (the share is equal) and the same
pods. The store joins them within a chunk of facts; ``join_touching`` joins what touches across
chunks, so the rows a window holds are bounded by its holdings, not by its facts.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["join_touching"]

FROM, TO = 3, 4  # the row's interval, half-open [from_ms, to_ms)


def _key(row: tuple) -> tuple:
    return row[:FROM] + row[TO + 1:]


def join_touching(rows: Iterable[tuple]) -> list[tuple]:
    """``rows`` with every run of touching rows of the same key joined into one, in the order
    (key, from_ms). A row that overlaps or leaves a gap before the next stays apart."""
    out: list[tuple] = []
    for row in sorted(rows, key=lambda r: (_key(r), r[FROM], r[TO])):
        last = out[-1] if out else None
        if last is not None and last[TO] == row[FROM] and _key(last) == _key(row):
            out[-1] = last[:TO] + (row[TO],) + last[TO + 1:]
        else:
            out.append(tuple(row))
    return out
