"""/metrics: loopback by default, and with a token only to a scraper that sends it."""

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from gpuledger.config import load_settings
from gpuledger.config.metrics_http import is_loopback, serve_metrics


def _get(port: int, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def registry():
    r = CollectorRegistry()
    Counter("gpuledger_test_total", "A counter.", ["tenant_id"], registry=r).labels("acme").inc()
    return r


def test_without_a_token_metrics_are_served_on_loopback(registry):
    server = serve_metrics(registry, 0)
    try:
        assert server.server_address[0] == "127.0.0.1"
        status, body = _get(server.server_address[1])
        assert status == 200 and 'gpuledger_test_total{tenant_id="acme"} 1.0' in body
    finally:
        server.shutdown()


@pytest.mark.parametrize("sent", [None, "wrong", "s3cret-token "])
def test_with_a_token_only_the_scraper_that_sends_it_reads(registry, sent):
    server = serve_metrics(registry, 0, token="s3cret-token")
    try:
        status, body = _get(server.server_address[1], sent)
        assert status == 401 and "acme" not in body
        assert _get(server.server_address[1], "s3cret-token")[0] == 200
    finally:
        server.shutdown()


def test_an_open_listener_beyond_loopback_is_reported(registry, capsys):
    server = serve_metrics(registry, 0, addr="0.0.0.0")
    server.shutdown()
    assert "GPULEDGER_METRICS_TOKEN" in capsys.readouterr().err
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")


def test_the_defaults_are_loopback_and_the_token_is_secret(tmp_path):
    s = load_settings(home=tmp_path, metrics_token="t0k")
    assert s.metrics_addr == "127.0.0.1" and s.query_addr == "127.0.0.1"
    assert "t0k" not in repr(s) and s.metrics_secret() == "t0k"
