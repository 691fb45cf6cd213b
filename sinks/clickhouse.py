"""The ClickHouse adapter of the fact-store and query ports, through clickhouse-connect.

The same code serves both engines: ``chdb://PATH`` opens the embedded engine on disk
(one process at a time may own PATH), ``http(s)://host:port`` reaches a server.
"""

from __future__ import annotations

import orjson
import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError

from gpuledger.domain.facts import FactBatch
from gpuledger.domain.inventory import Inventory
from gpuledger.sinks.base import Checkpoint, StoreError
from gpuledger.sinks.schema_sql import (CAPACITY_COLUMNS, DEMAND_COLUMNS, REQUEST_COLUMNS, UTILIZATION_COLUMNS,
                                       ddl_statements)

__all__ = ["ClickHouseStore", "EngineLockedError"]


class EngineLockedError(StoreError):
    """Another process owns the embedded engine's directory."""


class ClickHouseStore:
    def __init__(self, dsn: str, database: str = "gpuledger") -> None:
        self.dsn, self.db = dsn, database
        try:
            self.client = clickhouse_connect.get_client(dsn=dsn)
        except Exception as exc:  # noqa: BLE001 — driver errors vary by backend
            text = str(exc)
            if "Cannot lock file" in text or "lock" in text.lower() and dsn.startswith("chdb"):
                raise EngineLockedError(
                    f"the embedded ClickHouse at {dsn} is owned by another process (a running `gpuledger process`?)"
                ) from exc
            raise StoreError(f"cannot open ClickHouse at {dsn}: {text.splitlines()[0] if text else exc!r}") from exc

    def sibling(self, database: str) -> "ClickHouseStore":
        """The same engine and connection, another database (a replay's shadow)."""
        other = object.__new__(ClickHouseStore)
        other.dsn, other.db, other.client = self.dsn, database, self.client
        return other

    def drop_database(self) -> None:
        self.command(f"DROP DATABASE IF EXISTS {self.db}")

    def ensure_schema(self) -> None:
        for stmt in ddl_statements(self.db):
            self.command(stmt)

    def command(self, sql: str, parameters: dict | None = None) -> None:
        try:
            self.client.command(sql, parameters=parameters)
        except ClickHouseError as exc:
            raise StoreError(f"ClickHouse refused: {str(exc).splitlines()[0]}") from exc

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]:
        try:
            result = self.client.query(sql, parameters=parameters)
        except ClickHouseError as exc:
            raise StoreError(f"ClickHouse query failed: {str(exc).splitlines()[0]}") from exc
        return list(result.column_names), [tuple(r) for r in result.result_rows]

    def insert(self, table: str, rows: list[list], columns: list[str]) -> None:
        if not rows:
            return
        try:
            self.client.insert(f"{self.db}.{table}", rows, column_names=columns)
        except ClickHouseError as exc:
            raise StoreError(f"insert into {self.db}.{table} failed: {str(exc).splitlines()[0]}") from exc

    def write_facts(self, batch: FactBatch) -> None:
        for table, columns, facts in (("capacity_facts", CAPACITY_COLUMNS, batch.capacity),
                                      ("utilization_facts", UTILIZATION_COLUMNS, batch.utilization),
                                      ("request_facts", REQUEST_COLUMNS, batch.requests),
                                      ("demand_facts", DEMAND_COLUMNS, batch.demand)):
            self.insert(table, [[getattr(f, c) for c in columns] for f in facts], columns)

    def write_reference(self, cluster_id: str, kind: str, observed_at_ms: int, document: str) -> None:
        self.insert("reference_documents", [[cluster_id, kind, observed_at_ms, document]],
                     ["cluster_id", "kind", "observed_at_ms", "document"])

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
