"""Every dashboard query and docs/clickhouse.md answer that reads reference documents reads
the entries in force (sinks/reference_sql.py ``entries_in_force_sql``, as domain/reference_history.py
chooses them), declared once as its ``entries`` CTE in exactly that text: never the newest
document of a kind (``argMax(document, observed_at_ms)``), which a document for a later month
replaces. On the engine, tests/integration/test_dashboards_and_docs.py runs them after such
documents are published."""

from __future__ import annotations

import json
import re

import pytest
from deploy_support import REPO

from gpuledger.domain.reference_history import ENTRY_KEYS
from gpuledger.sinks.reference_sql import ENTRY_KINDS, entries_in_force_sql

DASHBOARDS = sorted((REPO / "deploy" / "grafana" / "dashboards").glob("*.json"))
DOCS = REPO / "docs" / "clickhouse.md"
TABLES = re.compile(r"\breference_(documents|history)\b")


def _flat(sql: str) -> str:
    """The SQL with its whitespace as one space, and none inside parentheses' ends."""
    return re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", " ".join(sql.split())))


def queries() -> list[tuple[str, str]]:
    """(where, SQL) of every panel and variable query and every SQL block of the docs."""
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for p in board["panels"]:
            for q in (p, *p.get("panels", [])):
                out += [(f"{path.name}: {q['title']}", t["rawSql"]) for t in q.get("targets", [])]
        out += [(f"{path.name}: variable {v['name']}", v["query"]["rawSql"]) for v in board["templating"]["list"]
                if v["type"] == "query"]
    out += [(f"{DOCS.name} block {i}", sql) for i, sql in
            enumerate(re.findall(r"```sql\n(.*?)```", DOCS.read_text(), re.S))]
    return out


READERS = [(where, sql) for where, sql in queries() if TABLES.search(sql)]


def test_the_entries_are_chosen_for_every_kind_the_domain_keys():
    assert set(ENTRY_KINDS) == set(ENTRY_KEYS)


def test_dashboards_and_docs_read_reference_documents():
    titles = {where for where, _ in READERS}
    for title in ("tenant-showback.json: Cost by tenant and component",
                  "tenant-showback.json: Cost per outcome by tenant",
                  "model-efficiency-slo.json: Cost per outcome by endpoint and model",
                  "scheduler-capacity.json: Guaranteed and borrowed GPU-hours by tenant and class"):
        assert title in titles


@pytest.mark.parametrize("where,sql", READERS, ids=[w for w, _ in READERS])
def test_reference_documents_are_read_as_the_entries_in_force(where, sql):
    flat, cte = _flat(sql), _flat(f"entries AS ({entries_in_force_sql('gpuledger')})")
    assert flat.count(cte) == 1, f"{where}: declare `{cte[:60]}…` (entries_in_force_sql) once"
    rest = flat.replace(cte, "")
    assert not TABLES.search(rest), f"{where}: reads the reference tables other than through the entries CTE"
    assert "argMax(document" not in rest
