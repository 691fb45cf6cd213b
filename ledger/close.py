"""Close a period into the ledger in two steps, and find the corrections later evidence makes.

``prepare_period`` reads facts through the query port, prices them with the same code as the
showback, checks the close policy and keeps the document as prepared (domain/approval.py).
``approve_period`` closes the latest prepared document under an approver's name and appends
it to the ledger. Both return a closed period's stored document untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from gpuledger.domain.approval import ApprovalError, approve, prepare, stale_against
from gpuledger.domain.ledger import NORMALIZATION_VERSION, ClosePolicy, billing_policy, build_ledger, corrections, line_from_doc, refusals
from gpuledger.domain.suspense import BILL_CONFIDENCE
from gpuledger.domain.pricing import Line, Priced, rounded
from gpuledger.domain.rows import canonical_sha256, documents_in_force, price_rows
from gpuledger.domain.showback import build_showback
from gpuledger.domain.timeutil import month_bounds_ms, parse_rfc3339_ms
from gpuledger.ledger.source_versions import source_versions
from gpuledger.sinks.base import Checkpoint
from gpuledger.sinks.ledger_store import LedgerPort, LedgerWriteRefused
from gpuledger.sinks.query import QueryPort
from gpuledger.sinks.reference_sql import inventory_documents_sql
from gpuledger.sinks.showback_sql import inventory_in_force_sql, read_showback_rows

__all__ = ["ApprovalError", "CloseResult", "approve_period", "booked_for", "build_document", "pending_corrections",
           "period_window", "prepare_period"]


@dataclass(frozen=True)
class CloseResult:
    document: dict
    already_closed: bool
    reasons: list[str]


def period_window(period: str) -> tuple[int, int]:
    """``YYYY-MM`` -> the calendar month in epoch ms. Raises ValueError."""
    parts = period.split("-")
    if len(parts) != 2 or len(parts[0]) != 4 or len(parts[1]) != 2 or not 1 <= int(parts[1]) <= 12:
        raise ValueError(f"a period is YYYY-MM, got {period!r}")
    return month_bounds_ms(parse_rfc3339_ms(f"{period}-01T00:00:00Z"))


def _priced(reader: QueryPort, period: str, bill: tuple[str, ...] | None) -> tuple[dict, dict, Priced, list[Line]]:
    from_ms, to_ms = period_window(period)
    rows = read_showback_rows(reader, from_ms, to_ms, bill)
    priced = price_rows(rows)
    return rows, build_showback(rows, priced=priced), priced, rounded(priced.lines)


def booked_for(closed: list[dict], period: str) -> list[Line]:
    """What the ledger already holds for a period: its own lines and every correction to it."""
    out = []
    for doc in closed:
        for d in doc["lines"]:
            if (doc["period"] == period and d["charge_class"] == "Regular") or d["corrects_period"] == period:
                out.append(line_from_doc(d))
    return out


def pending_corrections(reader: QueryPort, closed: list[dict], before: str | None = None) -> list[Line]:
    """Correction lines for every closed period (earlier than ``before``), against the facts
    now, each under the billing policy it was closed with; ``closed``: the ledger's documents."""
    out = []
    for doc in closed:
        if before is None or doc["period"] < before:
            now = _priced(reader, doc["period"], billing_policy(doc))[3]
            out += corrections(doc["period"], booked_for(closed, doc["period"]), now)
    return out


def _sources(checkpoint: Checkpoint | None) -> tuple[list[dict], int]:
    if checkpoint is None:
        return [], 0
    first = checkpoint.state.get("first_offsets", {})
    out = []
    for key, nxt in sorted(checkpoint.offsets.items()):
        topic, partition = key.rsplit(":", 1)
        out.append({"topic": topic, "partition": int(partition), "first_offset": first.get(key, nxt),
                    "last_offset": nxt - 1})
    return out, int(checkpoint.state.get("dead_lettered", 0))


def calculation(reader: QueryPort, rows: dict) -> dict:
    """What the numbers were calculated with, besides the facts: the normalization rules'
    version; per reference kind, the canonical hashes of the documents whose entries in force
    priced the period (domain/reference_history.py; for the inventory, the documents its
    approved GPUs and unavailability in the period were kept from), the earliest publication
    first; and ``inventory_entries``, the hash of those GPU entries and windows themselves. A
    document published later for other periods changes none of it."""
    documents: dict[str, list[str]] = {**documents_in_force(rows), "inventory": []}
    entries = None
    if rows.get("clusters"):
        p = {"clusters": rows["clusters"], "f": rows["from_ms"], "t": rows["to_ms"]}
        documents["inventory"] = [canonical_sha256(orjson.loads(r[0]))
                                  for r in reader.query(inventory_documents_sql(reader.db), p)[1]]
        gpus, unavailable = (reader.query(sql, p)[1] for sql in inventory_in_force_sql(reader.db))
        entries = canonical_sha256({"gpus": [list(r) for r in gpus], "unavailable": [list(r) for r in unavailable]})
    return {"normalization_version": NORMALIZATION_VERSION, "reference_documents": documents,
            "inventory_entries": entries}


def build_document(reader: QueryPort, closed: list[dict], checkpoint: Checkpoint | None, period: str,
                   progress=lambda _: None, bill: tuple[str, ...] | None = BILL_CONFIDENCE) -> tuple[dict, Priced]:
    """The period's ledger document (without its hash) from the facts ``reader`` sees, with
    the corrections it books for the closed periods before it; ``bill``: the confidence
    classes that bill tenants."""
    from_ms, to_ms = period_window(period)
    progress(f"ledger {period}: pricing the period")
    rows, showback, priced, lines = _priced(reader, period, bill)
    earlier = [d for d in closed if d["period"] < period]
    progress(f"ledger {period}: {len(lines)} lines; looking for corrections to {len(earlier)} closed period(s)")
    booked = pending_corrections(reader, earlier)
    sources, dead = _sources(checkpoint)
    versions = sorted({ln.ratecard_version for ln in lines if ln.ratecard_version})
    doc = build_ledger(period, from_ms, to_ms, showback, priced, lines, booked, {
        "currency": showback["currency"], "ratecard_versions": versions, "hierarchy": rows.get("hierarchy", ()),
        "sources": sources, "dead_lettered": dead, "evidence_to_ms": rows["as_of_ms"], "bill_confidence": bill,
        "calculation": calculation(reader, rows)})
    return doc, priced


def prepare_period(reader: QueryPort, ledger: LedgerPort, checkpoint: Checkpoint | None, period: str,
                   policy: ClosePolicy, by: str, at_ms: int, progress=lambda _: None,
                   edges: Callable[[str, int, int], list[bytes]] | None = None, dcgm_topic: str = "") -> CloseResult:
    """Step 1: the period's document, prepared by ``by`` (or the reasons it may not close);
    ``edges`` reads the source topics' records at the period's edges for the source systems'
    versions (ledger/source_versions.py; None: not read, and the document says so)."""
    existing = ledger.get(period)
    if existing is not None:
        return CloseResult(existing, True, [])
    closed = ledger.closed()
    doc, priced = build_document(reader, closed, checkpoint, period, progress, policy.bill_confidence)
    from_ms, to_ms = period_window(period)
    reasons = refusals(doc, priced, policy, to_ms)
    if reasons:
        return CloseResult(doc, False, reasons)
    doc["source_versions"] = source_versions(reader, edges, dcgm_topic, from_ms, to_ms)  # read only for a close
    doc = prepare(doc, by, at_ms, [d for d in closed if d["period"] < period])
    ledger.prepare(period, doc["hash"], at_ms, doc)
    progress(f"close {period}: prepared by {doc['prepared']['by']}, {doc['hash']}")
    return CloseResult(doc, False, [])


def approve_period(ledger: LedgerPort, period: str, by: str, at_ms: int, distinct_approver: bool,
                   progress=lambda _: None) -> CloseResult:
    """Step 2: the latest prepared document of ``period`` approved by ``by`` and closed.
    Raises ``ApprovalError`` when there is none, or it may not be approved (by that name)."""
    existing = ledger.get(period)
    if existing is not None:
        return CloseResult(existing, True, [])
    doc = ledger.prepared(period)
    if doc is None:
        raise ApprovalError(f"{period} is not prepared: run `gpuledger close --period {period}` first")
    stale = stale_against(doc, [d for d in ledger.closed() if d["period"] < period])
    if stale:
        raise ApprovalError(stale)
    closed = approve(doc, by, at_ms, distinct_approver, login=ledger.login())
    try:
        ledger.append(period, closed["hash"], at_ms, closed)
    except LedgerWriteRefused as exc:
        raise ApprovalError(f"the store refused to write the closed ledger for this login ({exc}): on a ClickHouse "
                            "server only a login holding the approver role closes a period (deploy/clickhouse/"
                            "logins.sh creates finops_approver); approve with its DSN in GPULEDGER_CLICKHOUSE_DSN") from exc
    progress(f"close {period}: approved by {closed['approval']['approved_by']} and closed, {closed['hash']}")
    return CloseResult(closed, False, [])
