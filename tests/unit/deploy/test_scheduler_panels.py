"""The scheduler dashboard's panels that are a tested query of sinks/scheduler_sql.py
(``PANELS``) run exactly that query: the same text, over the dashboard's range, filtered by
its tenant (and GPU class) variables, so a change to one is a change to the other."""

from __future__ import annotations

import json

import pytest
from deploy_support import REPO

from gpuledger.sinks.scheduler_sql import PANELS, as_panel

BOARD = REPO / "deploy" / "grafana" / "dashboards" / "scheduler-capacity.json"


def _panels() -> dict[str, dict]:
    board = json.loads(BOARD.read_text())
    return {q["title"]: q for p in board["panels"] for q in (p, *p.get("panels", [])) if "title" in q}


@pytest.mark.parametrize("title", sorted(PANELS))
def test_the_panel_runs_the_sinks_query(title):
    (target,) = _panels()[title]["targets"]
    query, where = PANELS[title]
    assert target["rawSql"] == as_panel(query("gpuledger", where)), (
        f"{title!r} differs from sinks/scheduler_sql.py PANELS[{title!r}]: write the function's as_panel SQL into "
        f"{BOARD.name}")


def test_as_panel_puts_the_dashboard_s_range_and_interval_in_the_window():
    sql = as_panel("SELECT a\n        FROM t WHERE x >= %(f)s AND x < %(t)s AND x % %(step)s = 0")
    assert sql == "SELECT a\nFROM t WHERE x >= $__from AND x < $__to AND x % ($__interval_s * 1000) = 0"
