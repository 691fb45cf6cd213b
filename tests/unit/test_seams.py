"""The packages follow the data flow: producers and the stream workers meet only at the bus
(topics, the publishing port, the wire schemas), the store's side never reaches into the demo,
and the bus depends on no stage it serves."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# package -> gpuledger packages it must never import
FORBIDDEN = {
    "producers": {"streams", "sinks", "replay", "ledger", "demo", "cli", "bench"},
    "streams": {"producers", "demo", "cli", "bench"},
    "sinks": {"producers", "demo", "cli", "bench"},
    "bus": {"producers", "streams", "sinks", "replay", "ledger", "demo", "cli", "bench"},
    "domain": {"producers", "streams", "sinks", "bus", "replay", "ledger", "demo", "cli", "bench", "stack"},
}


def imported_packages(source: str) -> set[str]:
    """The gpuledger packages a module imports (``gpuledger.X...`` -> ``X``), at any depth of the code."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpuledger" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_each_stage_imports_only_what_the_flow_allows():
    crossings = {}
    for package, forbidden in FORBIDDEN.items():
        files = sorted((ROOT / package).rglob("*.py"))
        assert files, package
        for f in files:
            bad = imported_packages(f.read_text()) & forbidden
            if bad:
                crossings[f.relative_to(ROOT).as_posix()] = sorted(bad)
    assert crossings == {}


def test_the_scan_sees_imports_inside_functions():
    assert imported_packages("def f():\n    from gpuledger.demo.plan import TENANTS\n") == {"demo"}
    assert imported_packages("import gpuledger.streams.engine as e\nfrom gpuledger import x\n") == {"streams"}
    assert imported_packages("from os import path\n") == set()
