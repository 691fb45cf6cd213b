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


def _post(server, body: bytes, headers: dict | None = None, path: str = "/query",
          timeout_s: float = 30) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout_s)
    base = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    conn.request("POST", path, body=body, headers={**base, **(headers or {})})
    resp = conn.getresponse()
    status, data = resp.status, orjson.loads(resp.read())
    conn.close()
    return status, data


def _sql(server, sql: str, timeout_s: float = 30, **headers) -> tuple[int, dict]:
    return _post(server, orjson.dumps({"sql": sql}), headers, timeout_s=timeout_s)


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


def test_queries_beyond_the_connection_cap_are_refused():
    release = threading.Event()

    class Held:
        def query(self, sql, parameters):
            release.wait(240)
            return ["x"], [[1]]

    # The cap is filled by whole queries the engine holds: a held slot is the server's own count,
    # not a guess about when its threads get to a socket, so the wait below ends as soon as they
    # have all started, however loaded the machine.
    server = QueryServer(Held(), threading.Lock(), TOKEN).start()
    answers: list[int] = []
    held = [threading.Thread(target=lambda: answers.append(_sql(server, "SELECT 1", timeout_s=300)[0]))
            for _ in range(MAX_CONNECTIONS)]
    try:
        for thread in held:
            thread.start()
        deadline = time.monotonic() + 120
        while server.running < MAX_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.running == MAX_CONNECTIONS, f"{server.running} of {MAX_CONNECTIONS} queries held a slot after 120 s"
        status, doc = _sql(server, "SELECT 2")
        # every slot held: refused at once, not queued without bound
        assert status == 503 and "rows" not in doc, (status, doc)
        assert answers == []
    finally:
        release.set()
        for thread in held:
            thread.join(300)
    assert answers == [200] * MAX_CONNECTIONS  # the held queries were answered when the engine let them go
    assert server.running == 0
    status, doc = _sql(server, "SELECT 3")  # and their slots came back
    server.stop()
    assert status == 200 and doc["rows"] == [[1]]


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
