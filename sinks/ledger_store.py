"""The ledger port: where closed periods are kept, append-only, and the prepared documents
that wait for approval (domain/approval.py).

``ClickHouseLedger`` keeps them in ``ledger_documents`` and ``ledger_prepared`` (MergeTrees
only ever INSERTed); ``MemoryLedger`` is its in-memory twin. A period's ledger is its first
closed document; the close command never writes a second one. A period may be prepared
again (after late evidence, or a refused approval): its latest prepared document counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import orjson

from gpuledger.sinks.base import StoreError
from gpuledger.sinks.clickhouse import ClickHouseStore

__all__ = ["ClickHouseLedger", "LedgerPort", "LedgerWriteRefused", "MemoryLedger"]


class LedgerWriteRefused(PermissionError):
    """The store refused to write a closed document for this login (on a ClickHouse server only
    the approver role may: sinks/access.py)."""


class LedgerPort(Protocol):
    def append(self, period: str, digest: str, closed_at_ms: int, document: dict) -> None: ...
    def get(self, period: str) -> dict | None: ...
    def closed(self) -> list[dict]: ...
    def prepare(self, period: str, digest: str, prepared_at_ms: int, document: dict) -> None: ...
    def prepared(self, period: str) -> dict | None: ...
    def login(self) -> str | None: ...


@dataclass
class MemoryLedger:
    rows: list[tuple[str, str, int, bytes]] = field(default_factory=list)
    prepared_rows: list[tuple[str, str, int, bytes]] = field(default_factory=list)

    login_name: str | None = None  # the store's login, where it has several (a server)
    refuse_closing: bool = False  # the twin of a login without the approver role

    def login(self) -> str | None:
        return self.login_name

    def prepare(self, period: str, digest: str, prepared_at_ms: int, document: dict) -> None:
        self.prepared_rows.append((period, digest, prepared_at_ms, orjson.dumps(document)))

    def prepared(self, period: str) -> dict | None:
        mine = [r for r in self.prepared_rows if r[0] == period]
        return orjson.loads(max(enumerate(mine), key=lambda ir: (ir[1][2], ir[0]))[1][3]) if mine else None

    def append(self, period: str, digest: str, closed_at_ms: int, document: dict) -> None:
        if self.refuse_closing:
            raise LedgerWriteRefused(f"{self.login_name}: not enough privileges to write the closed ledger")
        self.rows.append((period, digest, closed_at_ms, orjson.dumps(document)))

    def get(self, period: str) -> dict | None:
        mine = sorted((r for r in self.rows if r[0] == period), key=lambda r: r[2])
        return orjson.loads(mine[0][3]) if mine else None

    def closed(self) -> list[dict]:
        first: dict[str, tuple] = {}
        for r in sorted(self.rows, key=lambda r: r[2]):
            first.setdefault(r[0], r)
        return [orjson.loads(first[p][3]) for p in sorted(first)]


class ClickHouseLedger:
    def __init__(self, store: ClickHouseStore) -> None:
        self.store = store

    def login(self) -> str | None:
        """The ClickHouse login on a server; None on the embedded engine (one process, one user)."""
        if self.store.dsn.startswith("chdb"):
            return None
        _, rows = self.store.query("SELECT currentUser()")
        return str(rows[0][0])

    def append(self, period: str, digest: str, closed_at_ms: int, document: dict) -> None:
        try:
            self.store.insert("ledger_documents", [[period, digest, closed_at_ms, orjson.dumps(document).decode()]],
                              ["period", "hash", "closed_at_ms", "document"])
        except StoreError as exc:
            if "ACCESS_DENIED" in str(exc) or "Not enough privileges" in str(exc):
                raise LedgerWriteRefused(str(exc).splitlines()[0]) from exc
            raise

    def prepare(self, period: str, digest: str, prepared_at_ms: int, document: dict) -> None:
        self.store.insert("ledger_prepared", [[period, digest, prepared_at_ms, orjson.dumps(document).decode()]],
                          ["period", "hash", "prepared_at_ms", "document"])

    def prepared(self, period: str) -> dict | None:
        _, rows = self.store.query(f"SELECT document FROM {self.store.db}.ledger_prepared WHERE period = %(p)s "
                                   "ORDER BY prepared_at_ms DESC, inserted_at DESC LIMIT 1", {"p": period})
        return orjson.loads(rows[0][0]) if rows else None

    def get(self, period: str) -> dict | None:
        _, rows = self.store.query(f"SELECT document FROM {self.store.db}.ledger_documents WHERE period = %(p)s "
                                   "ORDER BY closed_at_ms LIMIT 1", {"p": period})
        return orjson.loads(rows[0][0]) if rows else None

    def closed(self) -> list[dict]:
        _, rows = self.store.query(f"SELECT argMin(document, closed_at_ms) FROM {self.store.db}.ledger_documents "
                                   "GROUP BY period ORDER BY period")
        return [orjson.loads(r[0]) for r in rows]
