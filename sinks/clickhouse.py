"""The ClickHouse adapter of the fact-store and query ports, through clickhouse-connect.

The same code serves both engines: ``chdb://PATH`` opens the embedded engine on disk
(one process at a time may own PATH), ``http(s)://host:port`` reaches a server.

Driver errors are translated here, once (``store_error``): transient ones (the connection,
a timeout, an overloaded server: ``TRANSIENT_CODES``) become ``TransientStoreError``, to be
retried; ones the same write can never get past (``PERMANENT_CODES``, and values the driver
cannot serialize into their column: an Int64 overflow, a None in a non-Nullable column)
become ``PermanentStoreError``. A server error with a code in neither list is taken as
transient: retried and alerted on, never dropped.
"""

from __future__ import annotations

import struct
from operator import attrgetter

import orjson
import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError, DataError

from gpuledger.config.settings import redact_dsn
from gpuledger.domain.facts import FactBatch
from gpuledger.domain.inventory import Inventory
from gpuledger.domain.requests import RequestFact
from gpuledger.sinks.base import Checkpoint, PermanentStoreError, StoreError, TransientStoreError
from gpuledger.sinks.health_sql import HEALTH_COLUMNS, INCIDENT_COLUMNS, health_ddl_statements
from gpuledger.sinks.isolate import TABLES
from gpuledger.sinks.reference_sql import history_sql, kept_documents_sql
from gpuledger.sinks.schema_sql import (CAPACITY_COLUMNS, DEMAND_COLUMNS, MODEL_COLUMNS, REQUEST_COLUMNS,
                                       UTILIZATION_COLUMNS, ddl_statements)

__all__ = ["ClickHouseStore", "EngineLockedError", "PERMANENT_CODES", "TRANSIENT_CODES", "store_error"]

# ClickHouse error codes (src/Common/ErrorCodes.cpp) after which the same request may succeed.
TRANSIENT_CODES = frozenset({
    3,    # UNEXPECTED_END_OF_FILE (connection cut)
    159,  # TIMEOUT_EXCEEDED
    160,  # TOO_SLOW
    164,  # READONLY (a replica in read-only mode, e.g. lost its keeper session)
    202,  # TOO_MANY_SIMULTANEOUS_QUERIES
    203,  # NO_FREE_CONNECTION
    209,  # SOCKET_TIMEOUT
    210,  # NETWORK_ERROR
    241,  # MEMORY_LIMIT_EXCEEDED
    242,  # TABLE_IS_READ_ONLY
    252,  # TOO_MANY_PARTS
    285,  # TOO_FEW_LIVE_REPLICAS
    319,  # UNKNOWN_STATUS_OF_INSERT
    425,  # SYSTEM_ERROR
    439,  # CANNOT_SCHEDULE_TASK
    999,  # KEEPER_EXCEPTION
})
# Codes after which the same request never succeeds: the data or the statement is wrong.
PERMANENT_CODES = frozenset({
    6,    # CANNOT_PARSE_TEXT
    16,   # NO_SUCH_COLUMN_IN_TABLE
    26,   # CANNOT_PARSE_QUOTED_STRING
    27,   # CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,   # ATTEMPT_TO_READ_AFTER_EOF
    33,   # CANNOT_READ_ALL_DATA
    36,   # BAD_ARGUMENTS
    38,   # CANNOT_PARSE_DATE
    41,   # CANNOT_PARSE_DATETIME
    43,   # ILLEGAL_TYPE_OF_ARGUMENT
    47,   # UNKNOWN_IDENTIFIER
    53,   # TYPE_MISMATCH
    60,   # UNKNOWN_TABLE
    62,   # SYNTAX_ERROR
    69,   # ARGUMENT_OUT_OF_BOUND
    70,   # CANNOT_CONVERT_TYPE
    72,   # CANNOT_PARSE_NUMBER
    81,   # UNKNOWN_DATABASE
    117,  # INCORRECT_DATA
    321,  # VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349,  # CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    497,  # ACCESS_DENIED
    516,  # AUTHENTICATION_FAILED
})
# What the driver raises while serializing rows into the native format (before anything is sent).
_SERIALIZATION = (DataError, ValueError, TypeError, AttributeError, OverflowError, struct.error)
# The columns of each fact kind's table (sinks/isolate.py ``TABLES`` names the table).
_COLUMNS = {"capacity": CAPACITY_COLUMNS, "utilization": UTILIZATION_COLUMNS, "requests": REQUEST_COLUMNS,
            "demand": DEMAND_COLUMNS, "models": MODEL_COLUMNS, "health": HEALTH_COLUMNS,
            "health_incidents": INCIDENT_COLUMNS}


def store_error(exc: BaseException, what: str, table: str = "") -> StoreError:
    """The store error a driver exception stands for (raise it ``from exc``)."""
    text = (str(exc).splitlines() or [repr(exc)])[0] or repr(exc)
    code = getattr(exc, "code", None)
    where = f"{what}: " if what else ""
    if isinstance(exc, _SERIALIZATION) and code is None:
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        return PermanentStoreError(f"{where}a value does not fit its column: {text}{cause}", table)
    if code in PERMANENT_CODES:
        return PermanentStoreError(f"{where}{text}", table)
    # the connection (OperationalError, OSError), TRANSIENT_CODES, and codes in neither list
    return TransientStoreError(f"{where}{text}", table)


class EngineLockedError(StoreError):
    """Another process owns the embedded engine's directory."""


class ClickHouseStore:
    def __init__(self, dsn: str, database: str = "gpuledger", settings: dict | None = None) -> None:
        """``settings``: the session's own, applied in order when it opens (a read-only
        session: its limits, then ``readonly``, which nothing on the session can lift)."""
        self.dsn, self.db = dsn, database
        try:
            self.client = clickhouse_connect.get_client(dsn=dsn, settings=settings)
        except Exception as exc:  # noqa: BLE001 — driver errors vary by backend
            text = str(exc)
            if "Cannot lock file" in text or "lock" in text.lower() and dsn.startswith("chdb"):
                raise EngineLockedError(
                    f"the embedded ClickHouse at {redact_dsn(dsn)} is owned by another process (a running `gpuledger process`?)"
                ) from exc
            raise StoreError(f"cannot open ClickHouse at {redact_dsn(dsn)}: {text.splitlines()[0] if text else exc!r}") from exc

    def sibling(self, database: str) -> "ClickHouseStore":
        """The same engine and connection, another database (a replay's shadow)."""
        other = object.__new__(ClickHouseStore)
        other.dsn, other.db, other.client = self.dsn, database, self.client
        return other

    def drop_database(self) -> None:
        self.command(f"DROP DATABASE IF EXISTS {self.db}")

    def ensure_schema(self) -> None:
        for stmt in ddl_statements(self.db) + health_ddl_statements(self.db):
            self.command(stmt)

    def command(self, sql: str, parameters: dict | None = None) -> None:
        try:
            self.client.command(sql, parameters=parameters)
        except (ClickHouseError, OSError) as exc:
            raise store_error(exc, "ClickHouse refused") from exc

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]:
        try:
            result = self.client.query(sql, parameters=parameters)
        except (ClickHouseError, OSError) as exc:
            raise store_error(exc, "ClickHouse query failed") from exc
        return list(result.column_names), [tuple(r) for r in result.result_rows]

    def insert(self, table: str, rows: list[list], columns: list[str], column_oriented: bool = False) -> None:
        """``rows``: one list per row, or with ``column_oriented`` one list per column."""
        if not rows:
            return
        try:
            self.client.insert(f"{self.db}.{table}", rows, column_names=columns, column_oriented=column_oriented)
        except (ClickHouseError, OSError) + _SERIALIZATION as exc:
            raise store_error(exc, f"insert into {self.db}.{table} failed", table) from exc

    def probe(self, table: str) -> None:
        """Raise a ``StoreError`` unless ``table`` exists and can be read (a write that fails on
        every row is then not the rows' fault)."""
        try:
            self.client.query(f"SELECT * FROM {self.db}.{table} LIMIT 0")
        except (ClickHouseError, OSError) as exc:
            raise store_error(exc, f"{self.db}.{table} cannot be used", table) from exc

    def write_facts(self, batch: FactBatch) -> None:
        for kind, table in TABLES.items():
            facts, columns = getattr(batch, kind), _COLUMNS[kind]
            if facts:  # column by column (a C-level map per column; no row lists to pivot back)
                self.insert(table, [list(map(attrgetter(c), facts)) for c in columns], columns, column_oriented=True)

    def write_encoded(self, kind: str, container: bytes) -> None:
        """Facts of ``kind`` as an Avro object container file (streams/fact_codec.py
        ``container``): ClickHouse reads the records itself, no row is built here."""
        table, columns = TABLES[kind], _COLUMNS[kind]
        try:
            self.client.raw_insert(f"{self.db}.{table}", columns, container, fmt="Avro")
        except (ClickHouseError, OSError) + _SERIALIZATION as exc:
            raise store_error(exc, f"insert into {self.db}.{table} failed", table) from exc

    def known_requests(self, fact_ids: list[str]) -> dict[str, RequestFact]:
        """The request facts already stored under ``fact_ids`` (the first recorded of each)."""
        out: dict[str, RequestFact] = {}
        ids = sorted(set(fact_ids))
        for i in range(0, len(ids), 10_000):
            try:
                result = self.client.query(f"SELECT {', '.join(REQUEST_COLUMNS)} FROM {self.db}.request_facts FINAL "
                                           "WHERE fact_id IN %(ids)s", parameters={"ids": ids[i:i + 10_000]})
            except (ClickHouseError, OSError) as exc:
                raise store_error(exc, f"reading {self.db}.request_facts failed", "request_facts") from exc
            out.update((r[0], RequestFact(*r)) for r in result.result_rows)
        return out

    def write_reference(self, cluster_id: str, kind: str, observed_at_ms: int, document: str,
                        published_at_ms: int) -> None:
        """Appended to ``reference_history``; ``reference_documents`` keeps one per kind (what it
        held from before the history is copied into the history first, once per store)."""
        if not getattr(self, "_kept_copied", False):
            self.command(kept_documents_sql(self.db))
            self._kept_copied = True
        self.insert("reference_history", [[cluster_id, kind, observed_at_ms, published_at_ms, document]],
                     ["cluster_id", "kind", "observed_at_ms", "published_at_ms", "document"])
        self.insert("reference_documents", [[cluster_id, kind, observed_at_ms, document]],
                     ["cluster_id", "kind", "observed_at_ms", "document"])

    def reference_history(self, cluster_id: str, kind: str) -> list[tuple[int, int, str]]:
        """Every document of ``kind`` stored for the cluster: (published_at_ms, observed_at_ms,
        document), the latest publication first (sinks/reference_sql.py)."""
        rows = self.query(history_sql(self.db), {"kind": kind, "clusters": [cluster_id]})[1]
        return [(int(p), int(o), d) for _, p, o, d in rows]

    def write_inventory(self, cluster_id: str, inventory: Inventory, document_ms: int) -> None:
        self.insert("inventory_gpus", [[cluster_id, g.gpu_uuid, g.node, g.model, g.gpu_class, g.mode, g.valid_from_ms,
                                         g.valid_to_ms, document_ms] for g in inventory.gpus],
                     ["cluster_id", "gpu_uuid", "node", "model", "gpu_class", "mode", "valid_from_ms", "valid_to_ms",
                      "document_ms"])
        self.insert("inventory_unavailable", [[cluster_id, u.gpu_uuid, u.from_ms, u.to_ms, u.reason, document_ms]
                                               for u in inventory.unavailable],
                     ["cluster_id", "gpu_uuid", "from_ms", "to_ms", "reason", "document_ms"])

    def save_checkpoint(self, processor: str, checkpoint: Checkpoint) -> None:
        self.insert("processor_checkpoints", [[processor, checkpoint.seq, orjson.dumps(checkpoint.offsets).decode(),
                                                orjson.dumps(checkpoint.state).decode()]],
                     ["processor", "seq", "offsets", "state"])

    def load_checkpoint(self, processor: str) -> Checkpoint | None:
        _, rows = self.query(f"SELECT seq, offsets, state FROM {self.db}.processor_checkpoints FINAL "
                             "WHERE processor = %(p)s ORDER BY seq DESC LIMIT 1", {"p": processor})
        if not rows:
            return None
        seq, offsets, state = rows[0]
        return Checkpoint(int(seq), orjson.loads(offsets), orjson.loads(state))

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass
