"""No dashboard variable can leave the string literal it is interpolated into.

Grafana pastes a variable's value into the panel's SQL as text. Inside a ClickHouse string
literal, a plain ``'${period}'`` lets a value such as ``x' OR 1=1 --`` close the literal
(a viewer can set any value in the URL), and Grafana's quoting formats do not help there:
``:sqlstring`` doubles quotes and ``:singlequote`` escapes them, but neither escapes the
backslash, which ClickHouse also reads as an escape. ``:percentencode`` leaves only letters,
digits and ``-_.~`` besides ``%``: nothing in it can end a literal, and a valid period
(``2026-10``) comes through unchanged. The rendering is tests/grafana_macros.py's, which
the integration tests run against the demo data.
"""

from __future__ import annotations

import json
import re

import pytest
from deploy_support import REPO
from grafana_macros import TimeRange, Variable, apply_conditional_all, render  # tests/grafana_macros.py

DASHBOARDS = sorted((REPO / "deploy" / "grafana" / "dashboards").glob("*.json"))
REFERENCE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.[^:}]+)?(?::([^}]+))?\}")
SAFE_IN_LITERAL = {"percentencode"}
RANGE = TimeRange(1_790_812_800_000, 1_790_812_800_000 + 6 * 3_600_000)
HOSTILE = "2026-10' OR 1=1 --\\"


def sql_texts(board: dict):
    """(where, SQL) of every panel target and every query variable."""
    for panel in board.get("panels", []):
        for p in (panel, *panel.get("panels", [])):
            for t in p.get("targets", []):
                if t.get("rawSql"):
                    yield f"panel {p.get('title')!r}", t["rawSql"]
    for v in board.get("templating", {}).get("list", []):
        for sql in (v.get("definition"), (v.get("query") or {}).get("rawSql") if isinstance(v.get("query"), dict)
                    else v.get("query")):
            if sql:
                yield f"variable {v['name']}", sql


def literal_spans(sql: str) -> list[tuple[int, int]]:
    """Start and end of each single-quoted literal (``''`` and ``\\'`` inside it)."""
    spans, i = [], 0
    while i < len(sql):
        if sql[i] == "'":
            j = i + 1
            while j < len(sql) and not (sql[j] == "'" and sql[j + 1:j + 2] != "'"):
                j += 2 if sql[j] in "\\'" else 1
            spans.append((i, j))
            i = j + 1
        else:
            i += 1
    return spans


def references_in_literals(sql: str) -> list[tuple[str, str | None]]:
    spans = literal_spans(sql)
    out = []
    for m in REFERENCE.finditer(sql):
        name = m.group(1) or m.group(2) or m.group(4)
        if name.startswith("__"):
            continue
        if any(a < m.start() < b for a, b in spans):
            out.append((m.group(0), m.group(3) or m.group(5)))
    return out


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_a_variable_inside_a_string_literal_is_percent_encoded(path):
    board = json.loads(path.read_text())
    for where, sql in sql_texts(board):
        for ref, fmt in references_in_literals(sql):
            assert fmt in SAFE_IN_LITERAL, (
                f"{path.name}, {where}: {ref} is inside a string literal; a value could close it "
                f"(use ${{name:percentencode}})")


def test_no_dashboard_interpolates_the_period_raw():
    text = "".join(p.read_text() for p in DASHBOARDS)
    assert "${period}" not in text and "$period" not in text.replace("${period:percentencode}", "")
    assert "${period:percentencode}" in text


def test_a_hostile_period_stays_inside_its_literal_and_a_real_one_is_unchanged():
    board = json.loads((REPO / "deploy" / "grafana" / "dashboards" / "tenant-showback.json").read_text())
    texts = [sql for _, sql in sql_texts(board) if "${period:percentencode}" in sql]
    assert texts
    for sql in texts:
        hostile = render(sql, RANGE, {"period": Variable("period", HOSTILE, [HOSTILE])})
        assert "OR 1=1" not in hostile and hostile.count("\\") == sql.count("\\")
        assert "2026-10%27%20OR%201%3D1%20--%5C" in hostile
        assert [hostile[a:b + 1] for a, b in literal_spans(hostile)] == [
            sql_literal.replace("${period:percentencode}", "2026-10%27%20OR%201%3D1%20--%5C")
            for sql_literal in (sql[a:b + 1] for a, b in literal_spans(sql))], "the literals are the template's"
        real = render(sql, RANGE, {"period": Variable("period", "2026-10", ["2026-10"])})
        assert real == render(sql.replace("${period:percentencode}", "${period}"), RANGE,
                              {"period": Variable("period", "2026-10", ["2026-10"])})


def test_the_check_finds_a_raw_or_quoted_variable_in_a_literal():
    assert references_in_literals("WHERE p = '${period}' AND t IN (${tenant:singlequote})") == [("${period}", None)]
    assert references_in_literals("x = '$period-01'") == [("$period", None)]
    assert references_in_literals("x = '${period:sqlstring}'") == [("${period:sqlstring}", "sqlstring")]
    assert references_in_literals("x = 'it''s ${period:percentencode}' AND $__from > 0") == [
        ("${period:percentencode}", "percentencode")]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_query_variables_store_the_plugins_variable_model(path):
    """grafana-clickhouse-datasource 4.19+ (``src/data/CHVariableSupport.tsx``, checked at v4.20.0)
    keeps a variable's query as ``{refId, queryType, rawSql}``, ``queryType`` one of ``sql``,
    ``databases``, ``tables``, ``columns``, ``columnValues``; custom SQL is ``sql`` (a panel
    query's ``table``/``timeseries`` is not a variable query type, and the editor shows none)."""
    board = json.loads(path.read_text())
    for v in board.get("templating", {}).get("list", []):
        if v["type"] == "query":
            assert v["query"] == {"refId": v["query"]["refId"], "queryType": "sql", "rawSql": v["definition"]}, v["name"]


# The filters the design asks of each dashboard (issue 17): variable name -> what it selects.
DESIGN_VARIABLES = {
    "fleet-capacity-health": {"cluster": "cluster", "node_pool": "node pool", "gpu_class": "GPU model",
                              "node": "node", "gpu": "GPU", "mode": "MIG mode", "severity": "health severity"},
    "tenant-showback": {"department": "department", "namespace": "namespace or VM group",
                        "service_tier": "service tier", "allocation_class": "allocation class",
                        "profile": "MIG or vGPU profile"},
}


def panel_sqls(board: dict) -> list[tuple[str, str]]:
    return [(where, sql) for where, sql in sql_texts(board) if where.startswith("panel ")]


@pytest.mark.parametrize("stem", sorted(DESIGN_VARIABLES))
def test_each_dashboard_declares_the_variables_the_design_lists_and_panels_filter_by_them(stem):
    board = json.loads((REPO / "deploy" / "grafana" / "dashboards" / f"{stem}.json").read_text())
    declared = {v["name"]: v for v in board["templating"]["list"]}
    missing = {name: what for name, what in DESIGN_VARIABLES[stem].items() if name not in declared}
    assert not missing, f"{stem} lacks the variables {missing}"
    panels = panel_sqls(board)
    for name in DESIGN_VARIABLES[stem]:
        v = declared[name]
        assert v["includeAll"] and v["multi"], name  # All (no filter) or any choice of values
        # the dashboards' one convention: every use inside $__conditionalAll(..., $name), so All
        # (or nothing chosen) drops the condition, and the values quoted one by one otherwise
        at_all = {name: Variable(name, ["$__all"], ["x"])}
        for where, sql in panels:
            left = {m.group(0) for m in REFERENCE.finditer(apply_conditional_all(sql, at_all))
                    if name in (m.group(1), m.group(2), m.group(4))}
            assert not left, f"{stem}, {where}: {left} outside $__conditionalAll(..., ${name})"
            formats = {m.group(5) for m in REFERENCE.finditer(sql) if m.group(4) == name}
            assert formats <= {"singlequote"}, f"{stem}, {where}: ${name} as {formats}, not ${{{name}:singlequote}}"
        readers = [where for where, sql in panels if f"${{{name}:singlequote}}" in sql]
        if name == "severity":  # filters the health panels over gpu_health_incidents, each of them
            health = [where for where, sql in panels if "gpu_health_incidents" in sql]
            assert set(health) <= set(readers), f"{stem}: not filtered by severity: {set(health) - set(readers)}"
        else:
            assert readers, f"{stem}: no panel filters by ${name}"
