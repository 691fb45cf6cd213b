"""Tenant isolation enforced by the ClickHouse engine, not by the queries.

On the embedded engine (here and in CI): each identity of the access model gets a process of
its own whose one user carries that identity's grants and row filters
(``AccessModel.embedded_users_xml``); the engine then refuses or filters. The SQL script
itself (roles, ``CREATE ROW POLICY``, users) needs a server: the embedded engine has no
storage for SQL-defined users and runs every query as ``default``. Here every statement of
it goes through the engine's parser, and ``test_access_sql_on_a_server`` applies it to the
server named by ``GPULEDGER_TEST_CLICKHOUSE_URL`` (an admin login, e.g.
``http://admin:secret@127.0.0.1:8123``) with ``make test-clickhouse-server``; ``make test``
leaves it out (marker ``clickhouse_server``), as no ClickHouse server can be installed here.
There it also checks what holds on a server at its shipped defaults (no config.d): a login
holding only the shared tenants role reads no fact, and the reader limits and quota apply.
The embedded engine enforces the readers' profile constraints and quota of the users file.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from chdb_identity import run_request
from gpuledger.sinks.access import TENANT_FACT_TABLES, AccessModel
from gpuledger.sinks.access_limits import ReaderLimits
from gpuledger.sinks.access_logins import stack_logins
from gpuledger.sinks.clickhouse import ClickHouseStore
from isolation_cases import (CLOSE_REQUEST, TENANTS, Runner, assert_reads_every_tenant, assert_tenant_isolated, load_requests,
                             probes, refused)

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parents[1] / "deploy" / "clickhouse"
ACME, GLOBEX = TENANTS
MODEL = AccessModel()


class EmbeddedEngine:
    """One on-disk embedded engine; each ``runner`` opens it in a new process as one identity."""

    def __init__(self, root: Path) -> None:
        self.root, self.data = root, root / "data"
        (root / "cwd").mkdir(parents=True, exist_ok=True)

    def runner(self, name: str, users_xml: str | None) -> Runner:
        path = "-"
        if users_xml is not None:
            path = str(self.root / f"{name}.xml")
            Path(path).write_text(users_xml)

        def run(requests: list[tuple[str, dict]]) -> dict[str, dict]:
            done = subprocess.run([sys.executable, str(HERE / "chdb_identity.py"), str(self.data), path],
                                  input=json.dumps([r for _, r in requests]), capture_output=True, text=True,
                                  cwd=self.root / "cwd", timeout=300)
            assert done.returncode == 0, f"{name}: the engine process failed:\n{done.stderr[-3000:]}"
            return dict(zip([n for n, _ in requests], json.loads(done.stdout)))
        return run


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EmbeddedEngine:
    """The project's schema and facts, written as the writer identity (its grants must suffice)."""
    eng = EmbeddedEngine(tmp_path_factory.mktemp("isolation"))
    results = eng.runner("writer", MODEL.embedded_users_xml(roles=[MODEL.writer]))(load_requests())
    failed = {n: r for n, r in results.items() if "error" in r}
    assert failed == {}, f"the writer's grants did not suffice for the worker's writes: {failed}"
    closed = eng.runner("approver", MODEL.embedded_users_xml(roles=[MODEL.approver]))([CLOSE_REQUEST])
    assert closed == {CLOSE_REQUEST[0]: {"ok": True}}, closed
    return eng


@pytest.fixture(scope="module")
def analyst_seen(engine) -> dict[str, dict]:
    return engine.runner("analyst", MODEL.embedded_users_xml(roles=[MODEL.analyst]))(probes("gpuledger", ACME, GLOBEX))


@pytest.mark.parametrize("me,other", [(ACME, GLOBEX), (GLOBEX, ACME)])
def test_a_tenant_reads_only_its_own_rows_and_nothing_else(engine, analyst_seen, me, other):
    seen = engine.runner(me, MODEL.embedded_users_xml(tenant_ids=[me]))(probes("gpuledger", me, other))
    assert_tenant_isolated(seen, analyst_seen, me)


def test_the_same_probes_without_isolation_read_other_tenants(engine, analyst_seen):
    # The unrestricted engine answers the cross-tenant probes with rows: the zeros above are
    # the engine's row policies at work, not probes that could never return anything.
    reads = [p for p in probes("gpuledger", ACME, GLOBEX) if "sql" in p[1]]
    seen = engine.runner("unrestricted", None)(reads)
    assert seen["other capacity_facts"]["rows"][0][0] > 0
    assert seen["not_mine request_facts"]["rows"][0][0] > 0
    assert seen["showback capacity"] == analyst_seen["showback capacity"]
    assert seen["read ledger_documents"] == {"rows": [[1]]}


def test_analyst_and_finance_read_every_tenant_and_only_finance_the_ledger(engine, analyst_seen):
    assert_reads_every_tenant(analyst_seen, "analyst")
    assert refused(analyst_seen["read ledger_documents"])
    finance = engine.runner("finance", MODEL.embedded_users_xml(roles=[MODEL.finance]))(probes("gpuledger", ACME, GLOBEX))
    assert_reads_every_tenant(finance, "finance")
    assert finance["read ledger_documents"] == {"rows": [[1]]}


def test_only_the_approver_closes_a_period_and_the_writer_only_prepares(engine):
    writer = engine.runner("writer-close", MODEL.embedded_users_xml(roles=[MODEL.writer]))(
        [("prepare", {"prepare": "2026-10", "by": "pat"}), ("approve", {"approve": "2026-10", "by": "quinn"}),
         ("forge", CLOSE_REQUEST[1])])
    assert "hash" in writer["prepare"], writer
    assert "approver role" in writer["approve"].get("error", "") and "ACCESS_DENIED" in writer["approve"]["error"]
    assert refused(writer["forge"]), "the writer may not write a closed document by hand either"
    finance = engine.runner("finance-close", MODEL.embedded_users_xml(roles=[MODEL.finance]))(
        [("approve", {"approve": "2026-10", "by": "quinn"})])
    assert "error" in finance["approve"], "finance reads the ledger; closing takes the approver role"
    approver = engine.runner("approver-close", MODEL.embedded_users_xml(roles=[MODEL.approver]))(
        [("approve", {"approve": "2026-10", "by": "quinn"}), ("again", {"approve": "2026-10", "by": "rosa"}),
         ("closed", {"sql": "SELECT period, count() FROM gpuledger.ledger_documents WHERE period = '2026-10' "
                            "GROUP BY period"}),
         ("facts", {"sql": "SELECT count() > 0 FROM gpuledger.capacity_facts"})] + probes("gpuledger", ACME, GLOBEX)[-3:])
    assert approver["approve"] == {"hash": writer["prepare"]["hash"], "approved_by": "quinn"}
    assert approver["again"] == approver["approve"], "re-approving is a no-op: the first approval stands"
    assert approver["closed"] == {"rows": [["2026-10", 1]]} and approver["facts"] == {"rows": [[True]]}
    assert refused(approver["drop"]) and refused(approver["delete"])


# What the Grafana ClickHouse plugin (v4.20.0, src/data/CHDatasource.ts, CHVariableSupport.tsx)
# runs for its query builder, schema pickers and autocomplete. ClickHouse keeps system.databases,
# .tables, .columns and .functions readable even with select_from_system_db_requires_grant
# (deploy/clickhouse/config.d), showing only what the login's grants let it see.
EDITOR_PROBES = [
    ("databases", {"sql": "SHOW DATABASES"}),
    ("tables", {"sql": "SHOW TABLES FROM gpuledger"}),
    ("describe", {"sql": 'DESC TABLE "gpuledger"."capacity_facts"'}),
    ("columns", {"sql": "SELECT name, type, table FROM system.columns WHERE database IN ('gpuledger') "
                        "AND table = 'capacity_facts'"}),
    ("system tables", {"sql": "SELECT name FROM system.tables WHERE database = 'gpuledger' ORDER BY name"}),
    ("functions", {"sql": "SELECT name FROM system.functions WHERE name = 'quantile'"}),
]


def test_the_grafana_login_runs_the_plugin_editors_schema_queries(engine):
    seen = engine.runner("grafana-editor", MODEL.embedded_users_xml(roles=[MODEL.analyst]))(EDITOR_PROBES)
    assert ["gpuledger"] in seen["databases"]["rows"], seen["databases"]
    assert {r[0] for r in seen["tables"]["rows"]} >= set(TENANT_FACT_TABLES), seen["tables"]
    assert "tenant_id" in [r[0] for r in seen["describe"]["rows"]], seen["describe"]
    assert "tenant_id" in [r[0] for r in seen["columns"]["rows"] if r[2] == "capacity_facts"], seen["columns"]
    assert seen["functions"] == {"rows": [["quantile"]]}
    assert "processor_checkpoints" not in {r[0] for r in seen["system tables"]["rows"]}, "hidden from the analyst"


def test_a_login_of_two_tenants_reads_both_and_a_tenant_without_a_policy_reads_none(engine):
    both = engine.runner("both", MODEL.embedded_users_xml(tenant_ids=[ACME, GLOBEX]))(probes("gpuledger", ACME, GLOBEX))
    assert both["by_tenant capacity_facts"]["rows"] == [[ACME, 3], [GLOBEX, 2]]
    assert both["not_mine capacity_facts"] == {"rows": [[2]]}  # globex's, never the unattributed ones
    bare = engine.runner("bare", MODEL.embedded_users_xml(roles=[MODEL.tenants_role]))(probes("gpuledger", ACME, GLOBEX))
    assert_reads_no_fact(bare)


def assert_reads_no_fact(seen: dict[str, dict]) -> None:
    """The shared tenants role alone: no row of any fact table, the rate cards only."""
    for t in TENANT_FACT_TABLES:
        assert seen[f"by_tenant {t}"] == {"rows": []}, t
        assert seen[f"other {t}"] == {"rows": [[0]]} and seen[f"not_mine {t}"] == {"rows": [[0]]}, t
    assert seen["reference kinds"] == {"rows": [["ratecards"]]}


# Small limits, so the engine's refusals show: a result over 10,000 rows, a quota of 12 queries.
TIGHT = ReaderLimits(max_result_rows=10_000, quota_queries=12)
LIMIT_PROBES = [
    ("small result", {"sql": "SELECT count() FROM (SELECT arrayJoin(range(9000)))"}),
    ("large result", {"sql": "SELECT x FROM (SELECT arrayJoin(range(20000)) AS x) ORDER BY x"}),
    ("lift result limit", {"sql": "SELECT 1 SETTINGS max_result_rows = 0"}),
    ("lift memory limit", {"sql": "SELECT 1 SETTINGS max_memory_usage = 0"}),
    ("no time limit", {"sql": "SELECT 1 SETTINGS max_execution_time = 0"}),
    ("longer time limit", {"sql": "SELECT 1 SETTINGS max_execution_time = 3600"}),
    ("shorter time limit", {"sql": "SELECT 1 SETTINGS max_execution_time = 30"}),
]


def assert_reader_limits(seen: dict[str, dict]) -> None:
    assert seen["small result"] == {"rows": [[9000]]}
    assert "TOO_MANY_ROWS" in seen["large result"].get("error", ""), seen["large result"]
    for probe in ("lift result limit", "lift memory limit", "no time limit", "longer time limit"):
        assert "SETTING_CONSTRAINT_VIOLATION" in seen[probe].get("error", ""), (probe, seen[probe])
    assert seen["shorter time limit"] == {"rows": [[1]]}, "a reader may lower its time limit (Grafana's driver does)"


QUOTA_QUERY = "SELECT count() > 0 FROM {db}.reference_documents"  # the engine counts queries that read tables


def assert_quota_stops(seen: dict[str, dict], queries: int) -> None:
    results = [seen[f"query {i}"] for i in range(queries)]
    assert results[0] == {"rows": [[True]]}, results[0]
    stopped = [r for r in results if "error" in r]
    assert stopped and all("QUOTA_EXCEEDED" in r["error"] for r in stopped), stopped[:2]


def test_the_engine_enforces_the_reader_limits_and_quota(engine):
    model = AccessModel(limits=TIGHT)
    for name, users_xml in (("tenant-limits", model.embedded_users_xml(tenant_ids=[ACME])),
                            ("analyst-limits", model.embedded_users_xml(roles=[model.analyst]))):
        assert_reader_limits(engine.runner(name, users_xml)(LIMIT_PROBES))
        queries = [(f"query {i}", {"sql": QUOTA_QUERY.format(db="gpuledger")}) for i in range(TIGHT.quota_queries + 5)]
        assert_quota_stops(engine.runner(f"{name}-quota", users_xml)(queries), len(queries))
    writer = engine.runner("writer-limits", model.embedded_users_xml(roles=[model.writer]))(LIMIT_PROBES[:3])
    assert writer["large result"]["rows"][:1] == [[0]] and writer["lift result limit"] == {"rows": [[1]]}


def test_the_writer_writes_and_reads_everything_but_cannot_drop_or_delete(engine):
    requests = [p for p in probes("gpuledger", ACME, GLOBEX) if p[0] != "write"]
    seen = engine.runner("writer", MODEL.embedded_users_xml(roles=[MODEL.writer]))(requests)
    assert seen["by_tenant capacity_facts"]["rows"] == [["", 2], [ACME, 3], [GLOBEX, 2]]
    assert seen["read processor_checkpoints"] == {"rows": [[1]]}
    assert refused(seen["drop"]) and refused(seen["delete"])


def _statements(path: Path) -> list[str]:
    body = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("--"))
    return [s.strip() for s in body.split(";\n") if s.strip()]


def test_every_statement_of_the_access_scripts_parses_as_clickhouse_sql(engine):
    model = AccessModel()
    statements = _statements(DEPLOY / "access.sql")
    statements += [s for x in stack_logins(model) for s in model.user_statements(x.user, [x.role], "0" * 64)]
    statements += model.drop_tenant_statements("ml-platform") + model.drop_base_statements()
    statements += model.shadow_database_statements("replay_2026_10") + model.drop_user_statements("tenant_acme")
    assert len(statements) > 60
    requests = [(s, {"sql": "SELECT formatQuerySingleLine(%(q)s)", "parameters": {"q": s}}) for s in statements]
    parsed = engine.runner("parser", None)(requests)
    bad = {s: r["error"] for s, r in parsed.items() if "error" in r}
    assert bad == {}
    policy = next(s for s in statements if "USING tenant_id = 'ml-platform'" in s and "request_facts" in s)
    formatted = parsed[policy]["rows"][0][0]
    assert "USING tenant_id = 'ml-platform'" in formatted and "TO `gpuledger_tenant_ml-platform`" in formatted
    assert "AS permissive" in formatted or "AS PERMISSIVE" in formatted
    for kind in ("CREATE SETTINGS PROFILE", "CREATE QUOTA"):
        made = next(s for s in statements if s.startswith(kind))
        again = parsed[made]["rows"][0][0]
        assert "max_result_rows" in again or "result_rows" in again, again
    # The parser refuses a damaged statement: the check above can fail.
    broken = engine.runner("parser", None)([("x", {"sql": "SELECT formatQuerySingleLine(%(q)s)",
                                                   "parameters": {"q": policy.replace(" TO ", " TOO ")}})])
    assert "error" in broken["x"]


# On a ClickHouse server -----------------------------------------------------------------------


def _login(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{user}:{password}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _server_runner(dsn: str, database: str) -> Runner:
    def run(requests: list[tuple[str, dict]]) -> dict[str, dict]:
        store = ClickHouseStore(dsn, database)
        out = {}
        try:
            for name, r in requests:
                out[name] = run_request(store, r)
        finally:
            store.close()
        return out
    return run


SERVER_QUOTA_QUERIES = 100  # above what one login's probes take (about 30 with the driver's own)


@pytest.mark.clickhouse_server
def test_access_sql_on_a_server():
    url = os.environ.get("GPULEDGER_TEST_CLICKHOUSE_URL")
    assert url, ("set GPULEDGER_TEST_CLICKHOUSE_URL=http://admin:PASSWORD@HOST:8123 to a ClickHouse server (20.4+): "
                 "the SQL roles and row policies need one (`make test-clickhouse-server`)")
    tag = secrets.token_hex(4)
    limits = ReaderLimits(max_result_rows=TIGHT.max_result_rows, quota_queries=SERVER_QUOTA_QUERIES)
    db, model = f"gpltest_{tag}", AccessModel(f"gpltest_{tag}", prefix=f"gpltest_{tag}", limits=limits)
    a, b = f"{ACME}-{tag}", f"{GLOBEX}-{tag}"
    logins = {"writer": [model.writer], "approver": [model.approver], "analyst": [model.analyst], a: [model.tenant_role(a)],
              b: [model.tenant_role(b)], "shared only": [model.tenants_role], "limits": [model.tenant_role(a)],
              "quota": [model.tenant_role(b)]}
    passwords = {who: secrets.token_hex(12) for who in logins}
    users = {who: f"gpltest_{tag}_{i}" for i, who in enumerate(logins)}
    admin = ClickHouseStore(url, db)
    try:
        for s in model.statements([a, b]):
            admin.command(s)
        for who, roles in logins.items():
            for s in model.user_statements(users[who], roles, hashlib.sha256(passwords[who].encode()).hexdigest()):
                admin.command(s)
        login = {who: _server_runner(_login(url, users[who], passwords[who]), db) for who in logins}
        loaded = login["writer"](_rename_tenants(load_requests(), {ACME: a, GLOBEX: b}))
        assert {n: r for n, r in loaded.items() if "error" in r} == {}
        assert refused(login["writer"]([CLOSE_REQUEST])[CLOSE_REQUEST[0]]), "only the approver writes the ledger"
        assert login["approver"]([CLOSE_REQUEST]) == {CLOSE_REQUEST[0]: {"ok": True}}
        editor = login["analyst"]([(n, {"sql": r["sql"].replace("gpuledger", db)}) for n, r in EDITOR_PROBES])
        assert {n: r for n, r in editor.items() if "error" in r} == {}, "the Grafana editors' schema queries"
        analyst = login["analyst"](probes(db, a, b))
        assert {r[0] for r in analyst["showback capacity"]["rows"]} == {a, b}
        for me, other in ((a, b), (b, a)):
            seen = login[me](probes(db, me, other))
            assert_tenant_isolated(_rename_back(seen, {a: ACME, b: GLOBEX}), _rename_back(analyst, {a: ACME, b: GLOBEX}),
                                   {a: ACME, b: GLOBEX}[me])
        # Whatever users_without_row_policies_can_read_rows says (the shipped default lets a
        # login with no policy of its own read every row): the shared role alone reads no fact.
        assert_reads_no_fact(login["shared only"](probes(db, a, b)))
        assert_reader_limits(login["limits"](LIMIT_PROBES))
        queries = [(f"query {i}", {"sql": QUOTA_QUERY.format(db=db)}) for i in range(SERVER_QUOTA_QUERIES + 5)]
        assert_quota_stops(login["quota"](queries), len(queries))
    finally:
        for s in ([st for u in users.values() for st in model.drop_user_statements(u)]
                  + [st for t in (a, b) for st in model.drop_tenant_statements(t)]
                  + model.drop_base_statements() + [f"DROP DATABASE IF EXISTS {db}"]):
            admin.command(s)
        admin.close()


def _rename_tenants(requests: list[tuple[str, dict]], names: dict[str, str]) -> list[tuple[str, dict]]:
    out = []
    for name, r in requests:
        if "rows" in r and "tenant_id" in r["columns"]:
            i = r["columns"].index("tenant_id")
            r = {**r, "rows": [row[:i] + [names.get(row[i], row[i])] + row[i + 1:] for row in r["rows"]]}
        out.append((name, r))
    return out


def _rename_back(seen: dict[str, dict], names: dict[str, str]) -> dict[str, dict]:
    return {n: ({"rows": [[names.get(v, v) if isinstance(v, str) else v for v in row] for row in r["rows"]]}
                if "rows" in r else r) for n, r in seen.items()}
