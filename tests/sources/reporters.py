"""Reporters documents for the request receiver's tests."""

from __future__ import annotations

import hashlib

import orjson

from gpuledger.producers.request_auth import ReporterDirectory

GATEWAY_TOKEN = "gateway-token-for-the-tests"


def reporters_document(*entries: tuple[str, str, list[str], list[str]]) -> bytes:
    """Reporters (name, token, tenants, endpoints); by default one gateway allowed everything."""
    entries = entries or (("gateway", GATEWAY_TOKEN, ["*"], ["*"]),)
    return orjson.dumps({"version": "1", "reporters": [
        {"name": n, "token_sha256": hashlib.sha256(t.encode()).hexdigest(), "tenants": ts, "endpoints": es}
        for n, t, ts, es in entries]})


def reporters(*entries: tuple[str, str, list[str], list[str]]) -> ReporterDirectory:
    return ReporterDirectory.parse(reporters_document(*entries))
