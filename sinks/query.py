"""The query port: how reports read facts.

``ClickHouseStore`` answers directly. While ``gpuledger process`` owns the embedded engine
(chdb allows one process per directory), ``WorkerQueryClient`` sends the same SQL to the
process's ``/query`` endpoint, announced in ``HOME/process.json`` (pid, URL and a digest of the
DSN: no secret), with the bearer token of ``HOME/query.token``; both files are mode 0600.
``open_reader`` picks.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import Protocol

import orjson

from gpuledger.sinks.base import StoreError
from gpuledger.sinks.clickhouse import ClickHouseStore

__all__ = ["MARKER", "QueryPort", "TOKEN_FILE", "WorkerQueryClient", "announce", "dsn_digest", "open_reader", "query_token"]


class QueryPort(Protocol):
    db: str

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]: ...


class WorkerQueryClient:
    def __init__(self, url: str, token: str, database: str = "gpuledger") -> None:
        self.url, self.db, self._token = url, database, token

    @classmethod
    def from_home(cls, home: Path) -> WorkerQueryClient:
        """The client of the endpoint announced under ``home`` (a running ``process``)."""
        info = orjson.loads((home / MARKER).read_bytes())
        return cls(info["query_url"], (home / TOKEN_FILE).read_text().strip())

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]:
        req = urllib.request.Request(self.url, data=orjson.dumps({"sql": sql, "parameters": parameters}),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self._token}"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                body = orjson.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise StoreError(f"query via the running process failed: {orjson.loads(exc.read()).get('error')}") from exc
        except urllib.error.URLError as exc:
            raise StoreError(f"the running process at {self.url} did not answer: {exc.reason}") from exc
        return body["columns"], [tuple(r) for r in body["rows"]]


MARKER, TOKEN_FILE = "process.json", "query.token"


def dsn_digest(dsn: str) -> str:
    return hashlib.sha256(dsn.encode()).hexdigest()


def _write_private(path: Path, data: bytes) -> None:
    """Write ``path`` readable by its owner only (created 0600, then renamed into place)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def query_token(configured: str | None) -> str:
    """The endpoint's token: the configured one, else a fresh random one per start."""
    return configured or secrets.token_urlsafe(32)


def announce(home: Path, url: str, dsn: str, token: str) -> Path:
    """Tell local readers where the endpoint is: ``HOME/process.json`` and ``HOME/query.token``."""
    home.mkdir(parents=True, exist_ok=True)
    _write_private(home / TOKEN_FILE, token.encode())
    marker = home / MARKER
    _write_private(marker, orjson.dumps({"pid": os.getpid(), "query_url": url, "dsn_sha256": dsn_digest(dsn)}))
    return marker


def _live_worker(home: Path, dsn: str) -> WorkerQueryClient | None:
    try:
        info = orjson.loads((home / MARKER).read_bytes())
        os.kill(int(info["pid"]), 0)
        if info.get("dsn_sha256") != dsn_digest(dsn):
            return None
        return WorkerQueryClient(info["query_url"], (home / TOKEN_FILE).read_text().strip())
    except (OSError, ValueError, KeyError, orjson.JSONDecodeError):
        return None


def open_reader(home: Path, dsn: str) -> QueryPort:
    """The running worker's endpoint when it owns the embedded engine, else the engine itself."""
    if dsn.startswith("chdb"):
        client = _live_worker(home, dsn)
        if client is not None:
            return client
    store = ClickHouseStore(dsn)
    store.ensure_schema()
    return store
