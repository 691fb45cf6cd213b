"""Who may report request events, and for whom: the reporters document of the HTTP receiver.

A request event says which tenant pays for the tokens, so a reporter (a gateway, a model
server) proves who it is with a bearer token, and the document says which tenants and
endpoints each reporter may report for. It holds the tokens' SHA-256, never the tokens::

    {"version": "2026-11-30",
     "reporters": [
       {"name": "gateway-eu", "token_sha256": "<hex of sha256(token)>",
        "tenants": ["team-a", "team-b"], "endpoints": ["qwen-shared"]},
       {"name": "central-gateway", "token_sha256": "...", "tenants": ["*"], "endpoints": ["*"]}]}

``"*"`` must be written out to mean any. A new token: ``python -c 'import secrets;
print(secrets.token_urlsafe(32))'``, its digest ``printf %s TOKEN | sha256sum``. The receiver
reads the document again when the file changes, so a token is added or revoked without a
restart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["Reporter", "ReporterDirectory", "ReportersFile"]


class _ReporterDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    token_sha256: str
    tenants: list[str] = Field(min_length=1)
    endpoints: list[str] = Field(min_length=1)

    @field_validator("token_sha256")
    @classmethod
    def _hex(cls, v: str) -> str:
        v = v.strip().lower()
        if len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
            raise ValueError("must be the 64 hex digits of the token's SHA-256")
        return v


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(min_length=1)
    reporters: list[_ReporterDoc]


@dataclass(frozen=True)
class Reporter:
    name: str
    digest: bytes
    tenants: frozenset[str]
    endpoints: frozenset[str]

    def refusal(self, tenant_id: object, endpoint_id: object) -> str | None:
        """Why this reporter may not report a request of ``tenant_id`` on ``endpoint_id`` (None: it may)."""
        if "*" not in self.tenants and tenant_id not in self.tenants:
            return f"reporter {self.name!r} may not report for tenant {tenant_id!r}"
        if "*" not in self.endpoints and endpoint_id not in self.endpoints:
            return f"reporter {self.name!r} may not report for endpoint {endpoint_id!r}"
        return None


class ReporterDirectory:
    def __init__(self, reporters: list[Reporter], version: str = "") -> None:
        self.reporters, self.version = reporters, version
        digests = [r.digest for r in reporters]
        if len(set(digests)) != len(digests):
            raise ValueError("two reporters share one token")

    @classmethod
    def parse(cls, raw: bytes, where: str = "reporters document") -> ReporterDirectory:
        try:
            doc = _Document.model_validate(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON: {exc}") from exc
        except ValidationError as exc:
            err = exc.errors()[0]
            at = ".".join(str(p) for p in err.get("loc", ()))
            raise ValueError(f"{where}: {at}: {err.get('msg')}") from exc
        return cls([Reporter(r.name, bytes.fromhex(r.token_sha256), frozenset(r.tenants), frozenset(r.endpoints))
                    for r in doc.reporters], doc.version)

    def identify(self, authorization: str | None) -> Reporter | None:
        """The reporter whose token the ``Authorization: Bearer`` header carries, or None."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme != "Bearer" or not token:
            return None
        digest = hashlib.sha256(token.strip().encode()).digest()
        found = None
        for r in self.reporters:  # compared in constant time, every entry
            if hmac.compare_digest(r.digest, digest):
                found = r
        return found


class ReportersFile:
    """The document at ``path``, read again whenever the file changes; a changed file that
    does not parse keeps the last good one in force (and says why)."""

    def __init__(self, path: Path, say=lambda _m: None) -> None:
        self.path, self._say, self._lock = Path(path), say, threading.Lock()
        self._stamp = self._read_stamp()
        try:
            self.current = ReporterDirectory.parse(self.path.read_bytes(), str(self.path))
        except OSError as exc:
            raise ValueError(f"cannot read the reporters document {self.path} ({exc.strerror})") from exc

    def _read_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def get(self) -> ReporterDirectory:
        stamp = self._read_stamp()
        if stamp is not None and stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    self._stamp = stamp
                    try:
                        self.current = ReporterDirectory.parse(self.path.read_bytes(), str(self.path))
                        self._say(f"requests: reporters document {self.path} reloaded "
                                  f"({len(self.current.reporters)} reporters)")
                    except (OSError, ValueError) as exc:
                        self._say(f"requests: {exc}; the previous reporters stay in force")
        return self.current
