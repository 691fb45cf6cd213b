"""Which reference entries are in force: the history of documents, effective-dated (pure).

Every document published for a cluster is kept (the store's reference history). What prices
a window is not the newest document of a kind but the union of the entries of them all: an
entry has a key (``ENTRY_KEYS``), the latest publication naming a key wins for it, and each
entry is then dated by its own fields, as its kind's parser and pricing read them (rate
cards, quotas and endpoint declarations ``[valid_from, valid_to)``, credits and suspense
decisions by ``period``). So a document changes only the entries it names, and only for the
time they are valid: a rate card for December leaves October priced as it was, and October's
card published again with another rate prices October anew (corrections, once it is closed).
Leaving an entry out of a later document does not end it: it is published again with a
``valid_to`` (a decision: released). A document that does not parse adds nothing (a warning
says so); the others stay in force.

``documents`` are a kind's stored documents, the latest publication first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from gpuledger.domain.cost import parse_ratecards
from gpuledger.domain.endpoints import parse_endpoints
from gpuledger.domain.pricing import parse_credits
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.suspense import parse_assignments
from gpuledger.domain.timeutil import month_bounds_ms, parse_rfc3339_ms

__all__ = ["ENTRY_KEYS", "InForce", "PRICING_PARSERS", "SERIES", "documents_used", "in_force"]

log = logging.getLogger(__name__)

PRICING_PARSERS: dict[str, Callable[[object], list]] = {
    "ratecards": parse_ratecards, "quotas": parse_quotas, "credits": parse_credits, "endpoints": parse_endpoints,
    "suspense": parse_assignments}
_WHAT = {"ratecards": "rate cards", "suspense": "suspense decisions"}  # as a warning names them


def _ms(value: object) -> int:
    return parse_rfc3339_ms(str(value))


def _valid(e: dict) -> tuple[int, int | None]:
    return _ms(e["valid_from"]), _ms(e["valid_to"]) if e.get("valid_to") else None


def _month(e: dict) -> tuple[int, int | None]:
    return month_bounds_ms(_ms(f"{e['period']}-01T00:00:00Z"))


def _month_start(e: dict) -> tuple[int, int | None]:
    start = _ms(f"{e['period']}-01T00:00:00Z")
    return start, start + 1  # a credit applies to a window its period starts in (domain/pricing.py)


# kind -> (the key of an entry, the time it applies to [from, to), None: open-ended)
ENTRY_KEYS: dict[str, tuple[Callable[[dict], object], Callable[[dict], tuple[int, int | None]]]] = {
    "ratecards": (lambda e: str(e["version"]), _valid),
    "quotas": (lambda e: (str(e["tenant_id"]), str(e["gpu_class"]), _ms(e["valid_from"])), _valid),
    "endpoints": (lambda e: (str(e["endpoint_id"]), _ms(e["valid_from"])), _valid),
    "credits": (lambda e: str(e["credit_id"]), _month_start),
    "suspense": (lambda e: str(e["assignment_id"]), _month),
}


# kind -> the series an entry is one of: at each instant, of a series' entries valid then, the
# one that starts latest is in force (ties: the later publication), as domain/cost.py
# ``card_windows`` and domain/quota.py ``quota_in_force`` choose; kinds without one: every entry.
SERIES: dict[str, Callable[[dict], object]] = {
    "ratecards": lambda e: (),
    "quotas": lambda e: (str(e["tenant_id"]), str(e["gpu_class"])),
    "endpoints": lambda e: str(e["endpoint_id"]),
}


@dataclass(frozen=True)
class InForce:
    """A kind's entries in force: ``entries`` (document index, raw entry), the latest
    publication's first and each in its document's order; ``parsed``, the same parsed;
    ``documents``, the documents that parse, the latest publication first."""

    kind: str
    documents: tuple[str, ...]
    entries: tuple[tuple[int, dict], ...]
    parsed: list


def in_force(kind: str, documents: Sequence[str]) -> InForce:
    """The entries of ``kind`` in force from its documents (the latest publication first)."""
    parse, (key, _) = PRICING_PARSERS[kind], ENTRY_KEYS[kind]
    kept: list[str] = []
    entries: list[tuple[int, dict]] = []
    taken: set = set()
    for i, doc in enumerate(documents):
        try:
            raw = orjson.loads(doc)
            parse(raw)
            keyed = [(key(e), e) for e in raw]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # JSON, parser and key errors
            log.warning("skipping stored %s document #%d (the latest first): %s; the others stay in force",
                        _WHAT.get(kind, kind), i, exc)
            continue
        entries += [(len(kept), e) for k, e in keyed if k not in taken]  # a key of a later document wins
        taken.update(k for k, _ in keyed)
        kept.append(doc)
    return InForce(kind, tuple(kept), tuple(entries), parse([e for _, e in entries]) if entries else [])


def documents_used(force: InForce, from_ms: int, to_ms: int) -> list[str]:
    """The documents an entry in force during ``[from_ms, to_ms)`` comes from, the earliest
    publication first: what priced the window. A document whose entries apply elsewhere, were
    published again later, or are outlasted by a later-starting one of their series, did not."""
    applies, series = ENTRY_KEYS[force.kind][1], SERIES.get(force.kind)
    live = [(i, e, *applies(e)) for i, e in force.entries]
    live = [(i, e, start, end) for i, e, start, end in live if start < to_ms and (end is None or end > from_ms)]
    if series is None:
        used = {i for i, *_ in live}
    else:
        used = set()
        cuts = {from_ms} | {t for *_, start, end in live for t in (start, end) if t is not None and from_ms < t < to_ms}
        for t in cuts:
            latest: dict[object, tuple[int, int]] = {}
            for i, e, start, end in live:
                k = series(e)
                if start <= t and (end is None or t < end) and (k not in latest or start > latest[k][0]):
                    latest[k] = (start, i)  # ties: the first, the later publication
            used |= {i for _, i in latest.values()}
    return [force.documents[i] for i in sorted(used, reverse=True)]
