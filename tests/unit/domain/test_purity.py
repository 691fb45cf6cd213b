"""domain/ imports no Kafka, ClickHouse, environment or clock."""

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[3] / "domain"
FORBIDDEN_MODULES = {"os", "time", "socket", "subprocess", "confluent_kafka", "aiokafka", "faust", "mode",
                     "clickhouse_connect", "chdb", "random", "uuid"}
FORBIDDEN_CALLS = {"now", "utcnow", "today", "time_ns", "monotonic", "getenv"}


def _violations(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FORBIDDEN_MODULES:
            found.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_CALLS | {"environ"}:
            found.append(node.attr)
    return found


def test_domain_modules_are_pure():
    files = sorted(DOMAIN.glob("*.py"))
    assert len(files) >= 8
    bad = {f.name: v for f in files if (v := _violations(f.read_text()))}
    assert bad == {}


def test_the_scan_catches_each_kind_of_impurity():
    assert _violations("import os") == ["os"]
    assert _violations("from confluent_kafka import Producer") == ["confluent_kafka"]
    assert _violations("import clickhouse_connect.driver") == ["clickhouse_connect.driver"]
    assert _violations("from datetime import datetime\nx = datetime.now()") == ["now"]
    assert _violations("import sys\nsys.modules['os'].environ") == ["environ"]
    assert _violations("from datetime import datetime\nx = datetime.fromtimestamp(0)") == []
