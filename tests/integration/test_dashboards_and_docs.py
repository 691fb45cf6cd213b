"""The provisioned Grafana dashboards and docs/clickhouse.md, run on the engine.

Demo data is built once through the real pipeline (capture -> ingest -> process) from 6 h
of the demo plan with what a dashboard needs to see in it: MIG (re-partitioned), time
slicing, vGPU, a shared endpoint's requests, pods waiting for MIG profiles (one for a
profile no GPU offers: fragmentation), a pod whose namespace names no tenant, a
maintenance window and a telemetry gap. Every panel's and every variable's SQL is expanded
as Grafana and the ClickHouse plugin would (tests/grafana_macros.py), with variables on All
and on real values, and must return rows; every SQL block of the docs must too, and the
docs' answers must agree with the showback where they compute the same thing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid
from pathlib import Path

import orjson
import pytest
import yaml

from grafana_macros import MacroError, TimeRange, Variable, apply_conditional_all, expand_macros, render, \
    replace_variables
from gpuledger.demo.builder import det_uuid
from gpuledger.demo.cluster import ClusterPlan, NamespacePlan, PodPlan, write_capture
from gpuledger.demo.plan import demo_plan
from gpuledger.domain.showback import build_showback
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.health_sql import health_ddl_statements
from gpuledger.sinks.schema_sql import ddl_statements
from gpuledger.sinks.showback_sql import read_showback_rows
from stack_support import REPO, Stack

pytestmark = pytest.mark.integration

GRAFANA = REPO / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DOCS = REPO / "docs" / "clickhouse.md"
START, HOURS = "2026-10-01T00:00:00Z", 6
H, M = 3_600_000, 60_000
T0 = parse_rfc3339_ms(START)
RANGE = TimeRange(T0, T0 + HOURS * H, interval_ms=300_000)
# Real values to select: chosen so every panel has data under them (a multi-value selection
# for project, whose capacity and requests live in different projects). The fleet's GPU is the
# demo's never-allocated GPU, which the fixture puts in maintenance and lends to a pod of no tenant.
SELECTION = {"tenant": "vision", "project": ["vision-apps", "vision-default"], "allocation_class": "borrowed",
             "period": "2026-10", "gpu_class": "H100-80GB", "node": "gpu-node-4", "endpoint": "chat-llm",
             "model": "llama-3.1-70b-instruct", "cluster": "prod-ai-1", "node_pool": "gpu-node",
             "gpu": demo_plan(T0, HOURS).nodes["gpu-node-4"][7].uuid, "mode": "exclusive", "severity": "critical",
             "department": "cc-vision", "namespace": "vision-train", "profile": "1g.10gb", "service_tier": "default"}
GRAFANA_GLOBALS = {"__from", "__to", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms",
                   "__dashboard", "__user", "__org", "__timezone", "__all"}
PLUGIN_MACROS = {"__fromTime", "__toTime", "__fromTime_ms", "__toTime_ms", "__timeFilter", "__timeFilter_ms",
                 "__dateFilter", "__dateTimeFilter", "__dt", "__timeInterval", "__timeInterval_ms", "__interval_s",
                 "__timeFrom", "__timeTo", "__timeGroup", "__conditionalAll"}


def fixture_plan() -> ClusterPlan:
    plan = demo_plan(T0, HOURS)
    spare = plan.nodes["gpu-node-4"][7]  # the demo's never-allocated GPU
    extra = [
        PodPlan("vision-train", "wants-2g", det_uuid("pod", "vision", "wants-2g"), "", (), T0 + 150 * M, T0 + 210 * M,
                0.0, waits_for_mig="2g.20gb"),
        PodPlan("nlp-train", "wants-4g", det_uuid("pod", "nlp", "wants-4g"), "", (), T0 + 4 * H, T0 + 5 * H, 0.0,
                waits_for_mig="4g.40gb"),
        PodPlan("sandbox", "notebook-0", det_uuid("pod", "sandbox", "notebook-0"), "gpu-node-4", (spare.index,),
                T0 + H, T0 + 2 * H, 0.4),
    ]
    unlabeled = NamespacePlan("sandbox", det_uuid("ns", "sandbox"), T0 - 24 * H, ((T0 - 24 * H, None),))
    return dataclasses.replace(plan, pods=plan.pods + extra, namespaces=plan.namespaces + [unlabeled],
                               unavailable=[(spare.uuid, T0 + 4 * H, T0 + 5 * H, "maintenance")])


@dataclasses.dataclass
class Demo:
    store: ClickHouseStore
    showback: dict


@pytest.fixture(scope="module")
def demo(broker, tmp_path_factory) -> Demo:
    home = tmp_path_factory.mktemp("dashboards") / "home"
    write_capture(fixture_plan(), home / "capture")
    stack = Stack(home, f"t{uuid.uuid4().hex[:10]}")
    stack.run("ingest", str(home / "capture"), timeout=600)
    stack.run("process", "--until-caught-up", timeout=900)
    stack.run("forecast", "--save", timeout=300)  # the scheduler dashboard's forecast panels read its rows
    to_iso = "2026-10-01T06:00:00Z"
    showback = json.loads(stack.run("showback", "--from", START, "--to", to_iso, "--format", "json").stdout)
    store = ClickHouseStore(stack.dsn)
    yield Demo(store, showback)
    store.close()


def has_data(rows: list[tuple]) -> bool:
    """Rows, and at least one value besides timestamps that is not NULL, zero or empty: an
    aggregate over nothing still returns a row of zeros."""
    return any(v not in (None, 0, "", []) for r in rows for v in r if not isinstance(v, (dt.date, dt.datetime)))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def provisioned_uid() -> str:
    (ds,) = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "clickhouse.yaml").read_text())["datasources"]
    return ds["uid"]


def all_panels(board: dict) -> list[dict]:
    return [q for p in board["panels"] for q in (p, *p.get("panels", []))]


def variable_refs(text: str) -> set[str]:
    """Names Grafana would treat as variables: $name, ${name[:fmt]}, [[name]]."""
    return {a or b or c for a, b, c in re.findall(r"\$(\w+)|\[\[(\w+?)(?::\w+)?\]\]|\$\{(\w+)(?:\.[^:^}]+)?(?::[^}]+)?\}",
                                                   text)}


# -- pure: provisioning and dashboard JSON ------------------------------------------------

def test_provisioning_points_grafana_at_the_dashboards_and_the_datasource():
    (provider,) = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "gpuledger.yaml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards"
    (ds,) = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "clickhouse.yaml").read_text())["datasources"]
    assert ds["type"] == "grafana-clickhouse-datasource" and ds["uid"] == "gpuledger-clickhouse"
    boards = [load(p) for p in DASHBOARDS]
    assert len(boards) == 4
    assert len({b["uid"] for b in boards}) == 4 and len({b["title"] for b in boards}) == 4


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_is_well_formed_for_provisioning(path):
    board, uid = load(path), provisioned_uid()
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", board["uid"]) and board["title"]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board.get("id") is None  # provisioning assigns ids
    panels = all_panels(board)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {path.name}"
    variables = board["templating"]["list"]
    names = [v["name"] for v in variables]
    assert len(names) == len(set(names))
    texts = []
    for p in panels:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        texts += [p.get("title", ""), p.get("description", "")]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "grafana-clickhouse-datasource", "uid": uid}, p["title"]
        assert p["targets"] and len({t["refId"] for t in p["targets"]}) == len(p["targets"])
        for t in p["targets"]:
            assert t["datasource"]["uid"] == uid and t["editorType"] == "sql" and t["rawSql"].strip()
            assert (t["format"], t["queryType"]) in ((0, "timeseries"), (1, "table")), p["title"]
            assert (p["type"] == "timeseries") == (t["format"] == 0), p["title"]
            texts.append(t["rawSql"])
    for i, v in enumerate(variables):
        if v["type"] == "query":
            assert v["datasource"]["uid"] == uid and v["query"]["rawSql"] == v["definition"]
            earlier = variable_refs(v["query"]["rawSql"]) - GRAFANA_GLOBALS - PLUGIN_MACROS
            assert earlier <= set(names[:i]), f"variable {v['name']} uses {earlier - set(names[:i])} before they exist"
            texts.append(v["query"]["rawSql"])
        else:
            assert v["type"] == "custom" and [o["value"] for o in v["options"][1:]] == v["query"].split(",")
    undefined = {r for t in texts for r in variable_refs(t)} - set(names) - GRAFANA_GLOBALS - PLUGIN_MACROS
    assert not undefined, f"{path.name} uses undefined variables or unknown macros: {sorted(undefined)}"


# -- pure: the expansion helper against the plugin's own tests (v4.20.0) -------------------
# pkg/macros/macros_test.go and pkg/plugin/driver_test.go of grafana/clickhouse-datasource v4.20.0.

README_RANGE = TimeRange(1415792726123, 1447328726456, interval_ms=20_000)


@pytest.mark.parametrize("sql,expected", [
    ("$__timeFilter(time)", "time >= toDateTime(1415792726) AND time <= toDateTime(1447328726)"),
    ("$__timeFilter_ms(time)",
     "time >= fromUnixTimestamp64Milli(1415792726123) AND time <= fromUnixTimestamp64Milli(1447328726456)"),
    ("$__dateFilter(date)", "date >= toDate('2014-11-12') AND date <= toDate('2015-11-12')"),
    ("$__dt(d, t)", "(d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')) AND "
                    "(t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))"),
    ("$__fromTime < $__toTime_ms", "toDateTime(1415792726) < fromUnixTimestamp64Milli(1447328726456)"),
    ("$__fromTime_ms, $__toTime", "fromUnixTimestamp64Milli(1415792726123), toDateTime(1447328726)"),
    ("$__interval_s * (a + b)", "20 * (a + b)"),
    ("$__timeInterval(column)", "toStartOfInterval(toDateTime(column), INTERVAL 20 second)"),
    ("$__timeInterval_ms(column)", "toStartOfInterval(toDateTime64(column, 3), INTERVAL 20000 millisecond)"),
    ("$__timeFilter(toDateTime(a, 'UTC'))",
     "toDateTime(a, 'UTC') >= toDateTime(1415792726) AND toDateTime(a, 'UTC') <= toDateTime(1447328726)"),
    ("where $__timeFilter(cast(sth as timestamp) )",
     "where cast(sth as timestamp) >= toDateTime(1415792726) AND cast(sth as timestamp) <= toDateTime(1447328726)"),
    # 4.19+: ClickHouse forms of the SDK's $__timeFrom, $__timeTo and $__timeGroup
    ("$__timeFrom(ts)", "ts >= toDateTime(1415792726)"),
    ("$__timeTo(ts)", "ts <= toDateTime(1447328726)"),
    ("$__timeGroup(ts, 5m)", "toStartOfInterval(toDateTime(ts), INTERVAL 300 second)"),
    ("$__timeGroup(ts, '1h')", "toStartOfInterval(toDateTime(ts), INTERVAL 3600 second)"),
    # 4.20: macros inside another macro's arguments expand first
    ("SELECT $__timeInterval($__fromTime) AS f",
     "SELECT toStartOfInterval(toDateTime(toDateTime(1415792726)), INTERVAL 20 second) AS f"),
    ("where $__timeFilter(coalesce(closed_at, $__toTime))",
     "where coalesce(closed_at, toDateTime(1447328726)) >= toDateTime(1415792726) AND "
     "coalesce(closed_at, toDateTime(1447328726)) <= toDateTime(1447328726)"),
    # comments are blanked before expansion; string literals (\\' and '' escapes) are kept
    ("SELECT $__fromTime -- $__timeFilter()\nFROM t", "SELECT toDateTime(1415792726) " + " " * 18 + "\nFROM t"),
    ("where msg = 'it\\'s -- fine' and $__fromTime", "where msg = 'it\\'s -- fine' and toDateTime(1415792726)"),
    ("where msg = 'it''s' /* x */ and $__toTime", "where msg = 'it''s' " + " " * 7 + " and toDateTime(1447328726)"),
    ("SELECT 1 -- no macro here", "SELECT 1 -- no macro here"),
    ("$__timeFilterX(t) $__unknown(t)", "$__timeFilterX(t) $__unknown(t)"),
])
def test_backend_macros_expand_as_the_plugin_does(sql, expected):
    assert expand_macros(sql, README_RANGE) == expected


@pytest.mark.parametrize("sql,message", [
    ("WHERE $__timeFilter", r"unexpected number of arguments: \$__timeFilter expected 1 argument\(s\), received 0"),
    ("SELECT $__timeFilter()", r"\$__timeFilter expected 1 argument\(s\), received 0"),
    ("WHERE $__timeFilter(t", r"\$__timeFilter expected 1 argument\(s\), received 0"),  # an unclosed ( gives no arguments
    ("$__dt(d)", r"\$__dateTimeFilter expected 2 argument\(s\), received 1"),
    ("$__timeFrom()", r"\$__timeFrom expected 1 argument\(s\), received 0"),
    ("$__timeGroup(ts)", r"\$__timeGroup expected 2 argument\(s\), received 1"),
    ("$__timeGroup(ts, nope)", r"\$__timeGroup: invalid interval 'nope'"),
    ("$__timeGroup(ts, 0s)", r"\$__timeGroup: interval must be positive"),
    ("SELECT * FROM $__table", r"\$__table: no table name in query context"),
])
def test_backend_macro_errors_are_the_plugins(sql, message):
    with pytest.raises(MacroError, match=message):
        expand_macros(sql, README_RANGE)


def test_backend_interval_floor_and_defaults():
    assert expand_macros("$__interval_s", TimeRange(0, 1000, interval_ms=200)) == "1"
    assert expand_macros("$__interval $__interval_ms", TimeRange(0, 1000, interval_ms=300_000)) == "5m 300000"


def test_conditional_all_and_variables_as_grafana_replaces_them():
    multi = {"tenant": Variable("tenant", ["a", "o'b"], ["a", "o'b", "c"])}
    all_ = {"tenant": Variable("tenant", ["$__all"], ["a", "b"])}
    empty = {"tenant": Variable("tenant", [], ["a"])}
    sql = "WHERE $__conditionalAll(t IN (${tenant:singlequote}, lower('X')), $tenant) AND x"
    assert render(sql, RANGE, multi) == "WHERE t IN ('a','o\\'b', lower('X')) AND x"
    assert apply_conditional_all(sql, all_) == "WHERE 1=1 AND x"
    assert apply_conditional_all(sql, empty) == "WHERE 1=1 AND x"
    assert replace_variables("IN ($tenant) OR [[tenant]]", all_, RANGE) == "IN ('a','b') OR 'a','b'"
    custom = {"c": Variable("c", "$__all", ["x"], all_value=".*")}
    assert replace_variables("'${c}' ${c:singlequote}", custom, RANGE) == "'.*' .*"
    period = {"period": Variable("period", "2026-10", ["2026-10"])}
    assert replace_variables("'${period}-01' $period", period, RANGE) == "'2026-10-01' 2026-10"
    assert replace_variables("$__from $__to $__timeFilter(t) $nope", {}, RANGE) == (
        f"{RANGE.from_ms} {RANGE.to_ms} $__timeFilter(t) $nope")


# -- integration: every panel and variable on the demo data --------------------------------

def resolve_variables(store: ClickHouseStore, board: dict, scenario: str) -> dict[str, Variable]:
    out: dict[str, Variable] = {}
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            sql = render(v["query"]["rawSql"], RANGE, out)
            _, rows = store.query(sql)
            options = [str(r[0]) for r in rows]
            assert options, f"variable {v['name']} has no options on the demo data:\n{sql}"
        else:
            options = [o.strip() for o in v["query"].split(",")]
        if scenario == "all":
            current = ["$__all"] if v.get("includeAll") else options[0]
        else:
            want = SELECTION[v["name"]]
            wanted = want if isinstance(want, list) else [want]
            assert set(wanted) <= set(options), f"{v['name']}: {wanted} not among the options {options}"
            current = wanted if v.get("multi") else wanted[0]
        out[v["name"]] = Variable(v["name"], current, options, v.get("allValue") or None)
    return out


@pytest.mark.parametrize("scenario", ["all", "value"])
@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_returns_rows_on_the_demo_data(demo, path, scenario):
    board = load(path)
    variables = resolve_variables(demo.store, board, scenario)
    failures = []
    for p in all_panels(board):
        for t in p.get("targets", []):
            sql = render(t["rawSql"], RANGE, variables)
            if "$" in sql:
                failures.append(f"{p['title']}: unexpanded {re.findall(r'[$][{]?[_A-Za-z]+', sql)}")
                continue
            try:
                _, rows = demo.store.query(sql)
            except Exception as exc:  # noqa: BLE001 - report every panel, not the first
                failures.append(f"{p['title']}: {exc}\n{sql}")
                continue
            if not has_data(rows):
                failures.append(f"{p['title']}: no rows with data ({rows[:3]})\n{sql}")
    assert not failures, "\n\n".join(failures)


# -- docs/clickhouse.md ---------------------------------------------------------------------

def doc_sections() -> tuple[str, dict[str, list[str]]]:
    """The tables part, and {question heading: [sql blocks]} of the questions part."""
    text = DOCS.read_text()
    tables, questions_part = text.split("## Questions answered in SQL", 1)
    questions: dict[str, list[str]] = {}
    for block in re.split(r"^### ", questions_part, flags=re.M)[1:]:
        heading = block.splitlines()[0].strip()
        questions[heading] = re.findall(r"```sql\n(.*?)```", block, re.S)
    return tables, questions


def question(number: int) -> list[str]:
    _, questions = doc_sections()
    (sqls,) = [s for h, s in questions.items() if h.startswith(f"{number}. ")]
    return sqls


def test_docs_document_every_table_and_their_columns():
    tables_part, questions = doc_sections()
    ddl = {m.group(2): stmt for stmt in ddl_statements("gpuledger") + health_ddl_statements("gpuledger")
           for m in [re.search(r"CREATE (TABLE|VIEW|MATERIALIZED VIEW|DICTIONARY) IF NOT EXISTS gpuledger\.(\w+)", stmt)]
           if m}
    assert "capacity_facts" in ddl and "ledger_documents" in ddl
    sections = {b.splitlines()[0].strip(): b for b in re.split(r"^### ", tables_part, flags=re.M)[1:]}
    missing = set(ddl) - set(sections)
    assert not missing, f"tables not documented in docs/clickhouse.md: {sorted(missing)}"
    for name, section in sections.items():
        assert name in ddl, f"docs/clickhouse.md documents {name}, which schema_sql.py does not create"
        documented = {c for cell in re.findall(r"^\| (`[^|]+) \|", section, re.M) for c in re.findall(r"`(\w+)`", cell)}
        absent = {c for c in documented if not re.search(rf"\b{c}\b", ddl[name])}
        assert not absent, f"{name}: documented columns not in the table: {sorted(absent)}"
    assert len(questions) >= 10 and all(h.endswith("?") and sqls for h, sqls in questions.items()), questions.keys()


def test_every_docs_query_returns_rows_on_the_demo_data(demo):
    _, questions = doc_sections()
    failures = []
    for heading, sqls in questions.items():
        for sql in sqls:
            try:
                _, rows = demo.store.query(sql)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"{heading}: {exc}")
                continue
            if not has_data(rows):
                failures.append(f"{heading}: no rows with data ({rows[:3]})")
    assert not failures, "\n".join(failures)


def check_priced_answers(demo: Demo) -> None:
    """Questions 1, 2 and 9 (quotas, endpoint declarations, rate cards) give the showback's numbers."""
    tenants = {t["tenant_id"]: t for t in demo.showback["tenants"]}
    cols, rows = demo.store.query(question(1)[0])
    split = {(r[0], r[1]): (r[2], r[3]) for r in rows}
    expected = {(t, c): (v["guaranteed"], v["borrowed"]) for t, e in tenants.items()
                for c, v in e["gpu_hours_by_class"].items()}
    assert split.keys() == expected.keys()
    for key, (g, b) in expected.items():
        assert split[key] == pytest.approx((g, b), abs=1e-6), key
    _, rows = demo.store.query(question(2)[0])
    idle_reserved = demo.showback["platform"]["idle_gpu_hours"]["tenant_reserved"]
    assert sum(r[-1] for r in rows) == pytest.approx(idle_reserved, abs=1e-6)
    (endpoint,) = demo.showback["endpoints"]
    _, rows = demo.store.query(question(9)[0])
    received = {r[2]: r[-1] for r in rows}
    assert received == pytest.approx({s["tenant_id"]: s["gpu_hours"] for s in endpoint["shares"]}, abs=2e-6)


def test_docs_answers_agree_with_the_showback(demo):
    check_priced_answers(demo)
    tenants = {t["tenant_id"]: t for t in demo.showback["tenants"]}
    _, rows = demo.store.query(question(10)[0])
    assert [(r[0], r[-1]) for r in rows] == [("gpu-node-2", 45.0)]  # the demo's 45-minute telemetry gap
    _, rows = demo.store.query(question(3)[0])
    assert ("capacity held without a tenant", "sandbox", "notebook-0", 1.0) in {(r[0], r[2], r[3], r[4]) for r in rows}
    _, rows = demo.store.query(question(8)[1])
    assert {r[1]: bool(r[-1]) for r in rows} == {"wants-2g": True, "wants-4g": False}
    _, rows = demo.store.query(question(13)[0])  # the demo's preempted and evicted pods
    held: dict[tuple[str, str], float] = {}
    for tenant, _, _, outcome, _, hours in rows:
        held[(tenant, outcome)] = held.get((tenant, outcome), 0.0) + hours
    reclaimed = {(t, o): e["reclaimed"][f"{o}_gpu_hours"] for t, e in tenants.items() if e["reclaimed"]
                 for o in ("preempted", "evicted") if e["reclaimed"][f"pods_{o}"]}
    assert set(held) == set(reclaimed) == {("vision", "evicted")}  # the 6-hour demo evicts one vision job
    assert held == pytest.approx(reclaimed, abs=1e-3)


def panel_rows(demo: Demo, stem: str, title: str) -> list[tuple]:
    """One panel's rows with every variable on All."""
    board = load(GRAFANA / "dashboards" / f"{stem}.json")
    variables = resolve_variables(demo.store, board, "all")
    (panel,) = [p for p in all_panels(board) if p.get("title") == title]
    return demo.store.query(render(panel["targets"][0]["rawSql"], RANGE, variables))[1]


def check_quota_panels(demo: Demo) -> None:
    """The panels that split GPU-hours by quota give the showback's guaranteed and borrowed hours."""
    tenants = {t["tenant_id"]: t for t in demo.showback["tenants"]}
    rows = panel_rows(demo, "scheduler-capacity", "Guaranteed and borrowed GPU-hours by tenant and class")
    expected = {(t, c, k): v[k] for t, e in tenants.items() for c, v in e["gpu_hours_by_class"].items()
                for k in ("guaranteed", "borrowed")}
    got = {(r[0], r[1], k): v for r in rows for k, v in (("guaranteed", r[2]), ("borrowed", r[3]))}
    assert got == pytest.approx(expected, abs=1e-3)
    rows = panel_rows(demo, "tenant-showback", "Guaranteed and borrowed GPU-hours")
    by_tenant: dict[str, float] = {}
    for tenant, _, _, allocation_class, hours in rows:
        if allocation_class == "borrowed":
            by_tenant[tenant] = by_tenant.get(tenant, 0.0) + hours
    assert by_tenant == pytest.approx({t: e["borrowed_gpu_hours"] for t, e in tenants.items()}, abs=5e-3)


def test_dashboard_numbers_agree_with_the_showback(demo):
    check_quota_panels(demo)
    rows = panel_rows(demo, "fleet-capacity-health", "Telemetry coverage per node")
    unknown = demo.showback["platform"]["idle_gpu_hours"]["telemetry_unknown"]
    assert sum(r[3] for r in rows) == pytest.approx(unknown, abs=5e-3)
    assert max(rows, key=lambda r: r[3])[0] == "gpu-node-2"


def test_cost_panels_agree_with_the_showback(demo):
    """The cost panels price the facts with the rate card in force as domain/pricing.py does; the
    showback rounds each line to cents, the panels each sum, so they agree to a few cents."""
    check_cost_panels(demo)


def check_cost_panels(demo: Demo) -> None:
    tenants = {t["tenant_id"]: t for t in demo.showback["tenants"] if t["cost"]}
    rows = panel_rows(demo, "tenant-showback", "Cost by tenant and component")
    got = {(r[0], r[1]): r[5] for r in rows}
    sign = {"credits": -1, "endpoint_recovered": -1}
    expected = {(t, part): sign.get(part, 1) * amount for t, e in tenants.items() for part, amount in e["cost"].items()
                if amount}
    assert {k for k, v in got.items() if v and k[1] != "subsidy"} == set(expected)
    assert {k: got[k] for k in expected} == pytest.approx(expected, abs=0.03)
    outcome = {t["tenant_id"]: t for t in demo.showback["cost_per_outcome"]["tenants"] if t["tenant_id"]}
    rows = panel_rows(demo, "tenant-showback", "Cost per outcome by tenant")
    assert {r[0] for r in rows} == set(outcome)
    for tenant, cost, ok, tokens, jobs, per_request, per_million, per_job in rows:
        want = outcome[tenant]
        assert (ok, tokens, jobs) == (want["successful_requests"], want["output_tokens"], want["completed_jobs"])
        assert cost == pytest.approx(want["cost"], abs=0.03)
        for value, key in ((per_request, "per_successful_request"), (per_million, "per_million_output_tokens"),
                           (per_job, "per_completed_job")):
            assert (value is None) == (want[key] is None), (tenant, key)
            assert value is None or value == pytest.approx(want[key], rel=1e-3), (tenant, key)
    (endpoint,) = demo.showback["cost_per_outcome"]["endpoints"]
    (model,) = demo.showback["cost_per_outcome"]["models"]
    rows = panel_rows(demo, "model-efficiency-slo", "Cost per outcome by endpoint and model")
    assert [r[:2] for r in rows] == [(endpoint["endpoint_id"], model["model"])]
    _, _, _, cost, ok, tokens, per_request, per_million = rows[0]
    assert (cost, ok, tokens) == (endpoint["cost"], endpoint["successful_requests"], endpoint["output_tokens"])
    assert (per_request, per_million) == (endpoint["per_successful_request"], endpoint["per_million_output_tokens"])


# -- documents published later: the entries in force ----------------------------------------

DECEMBER = "2026-12-01T00:00:00Z"


@dataclasses.dataclass
class InDatabase:
    """Runs SQL written for the gpuledger database on ``store``'s database, which holds the
    same ``tables``."""

    store: ClickHouseStore
    tables: tuple[str, ...]

    def query(self, sql: str, parameters: dict | None = None) -> tuple[list[str], list[tuple]]:
        named = re.sub(rf"\bgpuledger\.({'|'.join(self.tables)})\b", rf"{self.store.db}.\1", sql)
        return self.store.query(named, parameters)


def copy_of(store: ClickHouseStore, database: str) -> InDatabase:
    """The rows of ``store``'s tables in another database of the same engine: documents
    published there leave the demo's own as they were."""
    copy = store.sibling(database)
    copy.drop_database()
    copy.command(f"CREATE DATABASE {database}")
    _, rows = store.query(f"SELECT name FROM system.tables WHERE database = '{store.db}' AND engine LIKE '%MergeTree'")
    tables = tuple(sorted(r[0] for r in rows))
    for name in tables:
        copy.command(f"CREATE TABLE {database}.{name} AS {store.db}.{name}")
        copy.command(f"INSERT INTO {database}.{name} SELECT * FROM {store.db}.{name}")
    return InDatabase(copy, tables)


def publish(store: ClickHouseStore, kind: str, entries: list[dict], observed_at: str) -> None:
    """A document of ``kind`` stored as the sink stores one published after all the others."""
    _, rows = store.query(f"SELECT cluster_id, max(published_at_ms) FROM {store.db}.reference_history "
                          "GROUP BY cluster_id")
    ((cluster, last),) = rows
    store.write_reference(cluster, kind, parse_rfc3339_ms(observed_at), json.dumps(entries), int(last) + 1)


def newest(store: ClickHouseStore, kind: str) -> list[dict]:
    """The entries of the document of ``kind`` published last."""
    _, rows = store.query(f"SELECT any(cluster_id) FROM {store.db}.reference_history")
    return json.loads(store.reference_history(rows[0][0], kind)[0][2])


def repriced(card: dict, rate) -> dict:
    """The card with ``rate(old)`` for every GPU-hour rate."""
    return {**card, "gpu_hour": {k: {p: rate(v) for p, v in r.items()} for k, r in card["gpu_hour"].items()}}


def test_documents_published_later_leave_the_panels_to_the_entries_in_force(demo):
    """After a rate-card document holding only a card from December, a quotas document holding
    only quotas from December and an endpoints document declaring the endpoint from December
    are published, October's cost, quota and endpoint panels and answers are what the showback
    says, as before: the entries in force are every document's, each within its own dates
    (the newest document of a kind alone would leave October without a card, its quotas and its
    endpoint). October's card and quotas published again with other numbers, a credit and
    suspense decisions for October then price October anew, in the panels as in the showback."""
    copy = copy_of(demo.store, f"later_{uuid.uuid4().hex[:8]}")
    store = copy.store
    try:
        cards, quotas, endpoints = (newest(store, k) for k in ("ratecards", "quotas", "endpoints"))
        assert [c["version"] for c in cards] == ["2026-10-v1"] and quotas and endpoints
        publish(store, "ratecards", [{**repriced(c, lambda _: 9.99), "version": "2026-12-v1", "valid_from": DECEMBER,
                                      "valid_to": None} for c in cards], DECEMBER)
        publish(store, "quotas", [{**q, "guaranteed_gpus": q["guaranteed_gpus"] + 1, "valid_from": DECEMBER}
                                  for q in quotas], DECEMBER)
        publish(store, "endpoints", [{**e, "namespaces": ["nobody"], "valid_from": DECEMBER} for e in endpoints],
                DECEMBER)
        later = Demo(copy, demo.showback)
        check_cost_panels(later)
        check_quota_panels(later)
        check_priced_answers(later)

        october = cards[0]["valid_from"]
        publish(store, "ratecards", [repriced(c, lambda v: 2 * v) for c in cards], october)
        publish(store, "quotas", [{**q, "guaranteed_gpus": q["guaranteed_gpus"] / 2} for q in quotas], october)
        publish(store, "credits", [{"credit_id": "goodwill-1", "tenant_id": "vision", "period": "2026-10",
                                    "amount": 25, "reason": "an outage"}], october)
        # two decisions for the same hours at the same instant: the later in the list holds
        held = next(t["tenant_id"] for t in demo.showback["tenants"] if t["cost"].get("under_review"))
        payer = next(t["tenant_id"] for t in demo.showback["tenants"] if t["tenant_id"] not in ("", held))
        decided = {"period": "2026-10", "tenant_id": held, "reason": "reviewed", "by": "finops", "at": october}
        publish(store, "suspense", [{**decided, "assignment_id": "s-1", "to": "central"},
                                    {**decided, "assignment_id": "s-2", "to": payer}], october)
        showback = json.loads(orjson.dumps(build_showback(read_showback_rows(store, T0, T0 + HOURS * H))))
        before = {t["tenant_id"]: t["cost"] for t in demo.showback["tenants"]}
        after = {t["tenant_id"]: t["cost"] for t in showback["tenants"]}
        assert after["vision"]["credits"] == 25 and after[payer]["suspense_assigned"] > 0 and after != before
        again = Demo(copy, showback)
        check_cost_panels(again)
        check_quota_panels(again)
        check_priced_answers(again)
    finally:
        store.drop_database()
