"""The query port: how reports read facts.

``ClickHouseStore`` answers directly. While ``gpuledger process`` owns the embedded engine
(chdb allows one process per directory), ``WorkerQueryClient`` sends the same SQL to the
worker's ``/query`` endpoint, announced in ``HOME/process.json``. ``open_reader`` picks.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

import orjson

from gpuledger.sinks.base import StoreError
from gpuledger.sinks.clickhouse import ClickHouseStore

__all__ = ["QueryPort", "WorkerQueryClient", "open_reader"]


class QueryPort(Protocol):
    db: str

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]: ...


class WorkerQueryClient:
    def __init__(self, url: str, database: str = "gpuledger") -> None:
        self.url, self.db = url, database

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]:
        req = urllib.request.Request(self.url, data=orjson.dumps({"sql": sql, "parameters": parameters}),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                body = orjson.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise StoreError(f"query via the running worker failed: {orjson.loads(exc.read()).get('error')}") from exc
        except urllib.error.URLError as exc:
            raise StoreError(f"the running worker at {self.url} did not answer: {exc.reason}") from exc
        return body["columns"], [tuple(r) for r in body["rows"]]


def _live_worker(home: Path, dsn: str) -> str | None:
    marker = home / "process.json"
    try:
        info = orjson.loads(marker.read_bytes())
        os.kill(int(info["pid"]), 0)
    except (OSError, ValueError, KeyError, orjson.JSONDecodeError):
        return None
    return info["query_url"] if info.get("dsn") == dsn else None


def open_reader(home: Path, dsn: str) -> QueryPort:
    """The running worker's endpoint when it owns the embedded engine, else the engine itself."""
    if dsn.startswith("chdb"):
        url = _live_worker(home, dsn)
        if url:
            return WorkerQueryClient(url)
    store = ClickHouseStore(dsn)
    store.ensure_schema()
    return store
