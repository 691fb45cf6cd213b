"""The query endpoint, attacked as a process on the same host or a web page would: on the real
embedded engine, it answers only with the token, only non-browser requests, only reads, within
its time, memory and row limits, and never writes, reads files or drops a table."""

import http.client
import socket
import stat
import threading
import time
from pathlib import Path

import orjson
import pytest

from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.query import TOKEN_FILE, WorkerQueryClient, announce, dsn_digest
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.query_server import MAX_CONNECTIONS, QueryServer, read_limits

pytestmark = pytest.mark.integration
TOKEN = "t0ken-for-the-test"


@pytest.fixture
def served(tmp_path):
    store = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}")
    store.ensure_schema()
    reader = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}", settings=read_limits(2.0, 200 << 20, 1000))
    server = QueryServer(reader, threading.Lock(), TOKEN, max_body_bytes=64 << 10, read_timeout_s=1.0).start()
    yield store, server
    server.stop()
    reader.close()
    store.close()


def _post(server, body: bytes, headers: dict | None = None, path: str = "/query") -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    base = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn.request("POST", path, body=body, headers={**base, **(headers or {})})
    resp = conn.getresponse()
    status, data = resp.status, orjson.loads(resp.read())
    conn.close()
    return status, data


def _sql(server, sql: str, **headers) -> tuple[int, dict]:
    return _post(server, orjson.dumps({"sql": sql}), headers)


def test_a_read_with_the_token_is_answered(served):
    _, server = served
    status, doc = _sql(server, "SELECT count() FROM gpuledger.capacity_facts")
    assert status == 200 and doc["rows"] == [[0]]


@pytest.mark.parametrize("auth", [None, "", "Bearer wrong", f"bearer {TOKEN}x", f"Basic {TOKEN}"])
def test_without_the_token_nothing_runs(served, auth):
    _, server = served
    headers = {"Authorization": auth} if auth is not None else {}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/query", body=orjson.dumps({"sql": "SELECT 1"}),
                 headers={"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    assert resp.status == 401 and resp.getheader("WWW-Authenticate") == "Bearer"
    assert "rows" not in orjson.loads(resp.read())


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Sec-Fetch-Site": "cross-site"}, {"Content-Type": "text/plain"},
                                     {"Content-Type": "application/x-www-form-urlencoded"}])
def test_browser_requests_are_refused(served, headers):
    _, server = served
    status, doc = _sql(server, "SELECT 1", **headers)
    assert status in (403, 415) and "rows" not in doc


@pytest.mark.parametrize("sql", [
    "INSERT INTO gpuledger.request_facts (fact_id, tenant_id) VALUES ('forged', 'victim')",
    "INSERT INTO FUNCTION file('{out}', 'LineAsString') VALUES ('pwned')",
    "SELECT * FROM file('/etc/hostname', 'LineAsString')",
    "SELECT * FROM url('http://127.0.0.1:9/', 'LineAsString')",
    "DROP TABLE gpuledger.processor_checkpoints",
    "TRUNCATE TABLE gpuledger.reference_documents",
    "ALTER TABLE gpuledger.request_facts DELETE WHERE 1",
    "CREATE TABLE gpuledger.x (a Int8) ENGINE = Memory",
    "SET readonly = 0",
    "SELECT 1 SETTINGS readonly = 0",
    "SELECT count() FROM numbers(1e12) SETTINGS max_execution_time = 0",
])
def test_writes_files_ddl_and_lifted_limits_are_refused_by_the_engine(served, tmp_path, sql):
    store, server = served
    out = tmp_path / "written.txt"
    status, doc = _sql(server, sql.format(out=out))
    assert status == 400 and "readonly" in doc["error"].lower(), doc
    assert not out.exists()
    assert store.query("EXISTS TABLE gpuledger.processor_checkpoints")[1] == [(1,)]
    assert store.query("SELECT count() FROM gpuledger.request_facts")[1] == [(0,)]
    store.write_reference("c1", "ratecards", 1, "[]", 2)  # the writer's session is untouched by the refusal
    assert _sql(server, "SELECT count() FROM gpuledger.reference_documents")[1]["rows"] == [[1]]


def test_a_heavy_query_stops_at_the_time_limit(served):
    _, server = served
    started = time.monotonic()
    status, doc = _sql(server, "SELECT count() FROM numbers(1e13)")
    assert status == 400 and "timeout" in doc["error"].lower()
    assert time.monotonic() - started < 20


def test_memory_and_result_rows_are_limited(served):
    _, server = served
    status, doc = _sql(server, "SELECT groupArray(repeat('x', 1000000)) FROM numbers(1000)")
    assert status == 400 and "memory limit" in doc["error"].lower()
    status, doc = _sql(server, "SELECT number FROM numbers(5000)")
    assert status == 400 and "limit for result exceeded" in doc["error"].lower()


def test_oversized_bodies_are_refused_unread(served):
    _, server = served
    status, doc = _post(server, b"x" * (65 << 10))
    assert status == 413


def _silent_clients(port: int, n: int) -> list[socket.socket]:
    """Clients that send headers promising a body that never comes."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(f"POST /query HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n".encode())
        socks.append(sock)
    return socks


def test_silent_clients_are_dropped_at_the_read_timeout(served):
    _, server = served  # read timeout 1 s
    socks = _silent_clients(server.port, MAX_CONNECTIONS + 2)
    for sock in socks:
        sock.settimeout(10)
        assert sock.recv(64).startswith(b"HTTP/1.0 ")  # answered (400 or 503) and closed, not held
        sock.close()
    status, doc = _sql(server, "SELECT 7")
    assert status == 200 and doc["rows"] == [[7]]


def test_queries_beyond_the_connection_cap_are_refused(tmp_path):
    class Slow:
        def query(self, sql, parameters):
            return ["x"], [[1]]
    # The silent clients hold their slots until the read timeout; the handlers that take them
    # start as the server gets to them, which a loaded machine can put off for seconds: the
    # wait for the refusal is long, and stays well inside the read timeout.
    server = QueryServer(Slow(), threading.Lock(), TOKEN, read_timeout_s=180.0).start()
    try:
        socks = _silent_clients(server.port, MAX_CONNECTIONS)
        started, served_meanwhile = time.monotonic(), 0
        while (status := _sql(server, "SELECT 1")[0]) != 503 and time.monotonic() < started + 90:
            served_meanwhile += 1
            time.sleep(0.1)
        # every slot held: refused, not queued without bound
        assert status == 503, (f"{MAX_CONNECTIONS} silent clients connected, and {served_meanwhile} queries were "
                               f"still answered over {time.monotonic() - started:.1f} s")
        for sock in socks:
            sock.close()
    finally:
        server.stop()


def test_the_announcement_holds_no_secret_and_is_private(tmp_path):
    dsn = "http://admin:s3cret@clickhouse:8123"
    marker = announce(tmp_path, "http://127.0.0.1:1/query", dsn, "the-token")
    for path in (marker, tmp_path / TOKEN_FILE):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = marker.read_text()
    assert "s3cret" not in text and "the-token" not in text and dsn_digest(dsn) in text
    assert WorkerQueryClient.from_home(Path(tmp_path))._token == "the-token"


def test_the_client_sends_the_token(served, tmp_path):
    _, server = served
    url = f"http://127.0.0.1:{server.port}/query"
    assert WorkerQueryClient(url, TOKEN).query("SELECT 3")[1] == [(3,)]
    with pytest.raises(StoreError, match="bearer token"):
        WorkerQueryClient(url, "nope").query("SELECT 3")
