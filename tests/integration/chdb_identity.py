"""Runs requests against the embedded engine as one identity, in a process of its own.

    python chdb_identity.py DATA_DIR USERS_XML|- < requests.json > results.json

The embedded engine has one user, ``default``, fixed when the process opens it: USERS_XML
(rendered by ``AccessModel.embedded_users_xml``) gives it an identity's grants and row
filters; ``-`` opens it with the engine's built-in unrestricted user. Run it in an empty
working directory: the engine also reads a ``config.xml`` it finds there.

A request is ``{"ensure_schema": true}``, ``{"insert": TABLE, "columns": [...], "rows": [...]}``,
``{"command": SQL}``, ``{"sql": SQL, "parameters": {...}}``, or the two steps of a close through
the ledger port, ``{"prepare": PERIOD, "by": NAME}`` and ``{"approve": PERIOD, "by": NAME}``;
each result is ``{"rows": [...]}`` (``{"ok": true}`` for the others, ``{"hash": ...}`` for a
close step) or ``{"error": "<first line of the engine's refusal>"}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import clickhouse_connect

from gpuledger.domain.approval import ApprovalError, prepare
from gpuledger.ledger.close import approve_period
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.ledger_store import ClickHouseLedger

CLOSE_AT_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z


class IdentityStore(ClickHouseStore):
    """The project's store on the embedded engine opened with a users.xml of one identity."""

    def __init__(self, data_dir: str, users_xml: str | None, database: str = "gpuledger") -> None:
        options = {}
        if users_xml:
            config = Path(data_dir).parent / f"{Path(users_xml).stem}-config.xml"
            config.write_text(f"<clickhouse><users_config>{Path(users_xml).resolve()}</users_config></clickhouse>\n")
            options["config-file"] = str(config)
        self.dsn, self.db = f"chdb://{data_dir}", database
        self.client = clickhouse_connect.get_client(interface="chdb", path=data_dir, chdb_options=options or None)


def run_request(store: ClickHouseStore, request: dict) -> dict:
    """One request against ``store`` (as above); the engine's refusal is a result, not an error."""
    try:
        if "prepare" in request:
            ledger, period = ClickHouseLedger(store), request["prepare"]
            doc = prepare({"format": "gpuledger-ledger/1", "period": period, "lines": []}, request["by"], CLOSE_AT_MS,
                          [d for d in ledger.closed() if d["period"] < period])
            ledger.prepare(request["prepare"], doc["hash"], CLOSE_AT_MS, doc)
            return {"hash": doc["hash"]}
        if "approve" in request:
            done = approve_period(ClickHouseLedger(store), request["approve"], request["by"], CLOSE_AT_MS + 60_000, True)
            return {"hash": done.document["hash"], "approved_by": done.document["approval"]["approved_by"]}
        if request.get("ensure_schema"):
            store.ensure_schema()
        elif "insert" in request:
            store.insert(request["insert"], request["rows"], request["columns"])
        elif "command" in request:
            store.command(request["command"])
        else:
            _, rows = store.query(request["sql"], request.get("parameters"))
            return {"rows": [list(r) for r in rows]}
    except (StoreError, ApprovalError) as exc:
        return {"error": str(exc)}
    return {"ok": True}


def main(argv: list[str]) -> int:
    data_dir, users_xml = argv[1], (None if argv[2] == "-" else argv[2])
    store = IdentityStore(data_dir, users_xml)
    try:
        results = [run_request(store, r) for r in json.load(sys.stdin)]
    finally:
        store.close()
    json.dump(results, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
