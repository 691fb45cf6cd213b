"""Tenant-isolation cases shared by the embedded engine and a ClickHouse server: the facts
loaded for two tenants (and unattributed capacity), the probes an identity runs, and what
each identity must see. An identity runner takes ``[(name, request)]`` and returns
``{name: result}`` (requests and results as in chdb_identity.py)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from gpuledger.sinks.access import TENANT_FACT_TABLES
from gpuledger.sinks.schema_sql import CAPACITY_COLUMNS, DEMAND_COLUMNS, REQUEST_COLUMNS, UTILIZATION_COLUMNS
from gpuledger.sinks.coverage_sql import tenant_utilization_sql
from gpuledger.sinks.showback_sql import tenant_capacity_sql

Runner = Callable[[list[tuple[str, dict]]], dict[str, dict]]

T0_MS = 1_790_812_800_000  # 2026-10-01T00:00:00Z
H_MS = 3_600_000
WINDOW = {"f": T0_MS, "t": T0_MS + 24 * H_MS}
TENANTS = ("acme", "globex")
UNATTRIBUTED = ""  # capacity nobody is charged for: no tenant may read it
COLUMNS = {"capacity_facts": CAPACITY_COLUMNS, "utilization_facts": UTILIZATION_COLUMNS,
           "request_facts": REQUEST_COLUMNS, "demand_facts": DEMAND_COLUMNS}
NUMERIC = {"capacity_fraction", "valid_from_ms", "valid_to_ms", "src_partition", "src_offset", "observed_at_ms",
           "span_ms", "sm_active_ratio", "fb_used_bytes", "power_w", "energy_j", "arrived_at_ms", "input_tokens",
           "output_tokens", "queue_s", "ttft_s", "e2e_s", "instances", "waited_from_ms", "waited_to_ms",
           "scheduled_ms", "running_ms", "priority"}
ALLOCATIONS = {"acme": 3, "globex": 2, UNATTRIBUTED: 2}  # capacity facts per tenant
REQUESTS = {"acme": 4, "globex": 3}
WAITS = {"acme": 1, "globex": 2}
DENIED_TABLES = ("ledger_documents", "ledger_prepared", "processor_checkpoints", "inventory_gpus",
                 "inventory_unavailable")
REFUSED = ("ACCESS_DENIED", "Not enough privileges", "READONLY", "readonly mode")


def _row(table: str, **values) -> list:
    return [values.get(c, 0 if c in NUMERIC else "") for c in COLUMNS[table]]


def fact_rows() -> dict[str, list[list]]:
    """One capacity fact per GPU-hour (the unattributed ones: one allocated without a tenant,
    one unallocated), a DCGM sample on each, requests and MIG waits of both tenants."""
    out: dict[str, list[list]] = {t: [] for t in COLUMNS}
    offset = 0
    for tenant, n in ALLOCATIONS.items():
        for i in range(n):
            offset += 1
            fid = f"cap-{tenant or 'none'}-{i}"
            kind = "unallocated" if not tenant and i == 1 else "allocated"
            start = T0_MS + offset * H_MS
            out["capacity_facts"].append(_row(
                "capacity_facts", fact_id=fid, cluster_id="c1", kind=kind, gpu_uuid=f"GPU-{offset}", node="n1",
                gpu_class="H100-80GB", mode="exclusive", capacity_fraction=1.0, valid_from_ms=start,
                valid_to_ms=start + H_MS, tenant_id=tenant, project_id=f"{tenant}-p" if tenant else "",
                namespace=f"{tenant}-ns" if tenant else "", workload_kind="pod",
                confidence="high" if tenant else "unattributed", src_topic="t", src_offset=offset))
            out["utilization_facts"].append(_row(
                "utilization_facts", fact_id=f"u-{fid}", cluster_id="c1", gpu_uuid=f"GPU-{offset}", node="n1",
                observed_at_ms=start + 10_000, span_ms=10_000, sm_active_ratio=0.5, capacity_fact_id=fid, kind=kind,
                tenant_id=tenant, confidence="high" if tenant else "unattributed", src_topic="t", src_offset=offset))
    for tenant, n in REQUESTS.items():
        out["request_facts"] += [_row("request_facts", fact_id=f"r-{tenant}-{i}", cluster_id="c1", endpoint_id="chat",
                                      model="m", request_id=f"{tenant}-{i}", tenant_id=tenant,
                                      observed_at_ms=T0_MS + i * 60_000, arrived_at_ms=T0_MS + i * 60_000 - 500,
                                      outcome="success", input_tokens=100, output_tokens=50) for i in range(n)]
    for tenant, n in WAITS.items():
        out["demand_facts"] += [_row("demand_facts", fact_id=f"d-{tenant}-{i}", cluster_id="c1", tenant_id=tenant,
                                     pod_name=f"{tenant}-pod-{i}", profile="3g.40gb", instances=1,
                                     waited_from_ms=T0_MS, waited_to_ms=T0_MS + H_MS, outcome="scheduled")
                                for i in range(n)]
    return out


def load_requests() -> list[tuple[str, dict]]:
    """What the writer runs: the project's schema, then the facts and the other tables."""
    facts = fact_rows()
    out = [("schema", {"ensure_schema": True})]
    out += [(f"insert {t}", {"insert": t, "columns": COLUMNS[t], "rows": rows}) for t, rows in facts.items()]
    out += [("insert reference_documents", {"insert": "reference_documents",
                                            "columns": ["cluster_id", "kind", "observed_at_ms", "document"],
                                            "rows": [["c1", "ratecards", T0_MS, "{}"],
                                                     ["c1", "quotas", T0_MS, '{"acme": 3, "globex": 2}']]}),
            ("insert inventory_gpus", {"insert": "inventory_gpus", "columns": ["cluster_id", "gpu_uuid", "node",
                                                                               "model", "gpu_class", "mode",
                                                                               "valid_from_ms", "document_ms"],
                                       "rows": [["c1", "GPU-1", "n1", "H100", "H100-80GB", "exclusive", 0, T0_MS]]}),
            ("insert processor_checkpoints", {"insert": "processor_checkpoints",
                                              "columns": ["processor", "seq", "offsets", "state"],
                                              "rows": [["attribution", 1, "{}", "{}"]]})]
    return out


# The closed ledger: the approver writes it, the writer may not (sinks/access.py).
CLOSE_REQUEST = ("insert ledger_documents", {"insert": "ledger_documents",
                                             "columns": ["period", "hash", "closed_at_ms", "document"],
                                             "rows": [["2026-09", "h", T0_MS, '{"period": "2026-09", "hash": "h", "lines": ["acme", "globex"]}']]})


def loaded_counts() -> dict[str, Counter]:
    """Rows per tenant of each fact table, as loaded."""
    facts = fact_rows()
    return {t: Counter(r[COLUMNS[t].index("tenant_id")] for r in facts[t]) for t in TENANT_FACT_TABLES}


def probes(db: str, me: str, other: str) -> list[tuple[str, dict]]:
    """What an identity tries: per fact table its rows by tenant, an explicit read of another
    tenant's rows and of the rows not its own; the project's showback SQL; the shared and the
    closed tables; and ways around: writing, lifting readonly, the files, dropping a table."""
    out = []
    for t in TENANT_FACT_TABLES:
        out.append((f"by_tenant {t}", {"sql": f"SELECT tenant_id, count() FROM {db}.{t} FINAL "
                                               "GROUP BY tenant_id ORDER BY tenant_id"}))
        out.append((f"other {t}", {"sql": f"SELECT count() FROM {db}.{t} WHERE tenant_id = '{other}'"}))
        out.append((f"not_mine {t}", {"sql": f"SELECT count() FROM {db}.{t} WHERE tenant_id != '{me}'"}))
    out.append(("showback capacity", {"sql": tenant_capacity_sql(db), "parameters": WINDOW}))
    out.append(("showback utilization", {"sql": tenant_utilization_sql(db), "parameters": WINDOW}))
    out.append(("reference kinds", {"sql": f"SELECT kind FROM {db}.reference_documents FINAL ORDER BY kind"}))
    out += [(f"read {t}", {"sql": f"SELECT count() FROM {db}.{t}"}) for t in DENIED_TABLES]
    out.append(("write", {"command": f"INSERT INTO {db}.capacity_facts (fact_id, tenant_id) VALUES ('forged', '{me}')"}))
    out.append(("lift readonly", {"sql": f"SELECT count() FROM {db}.capacity_facts SETTINGS readonly = 0"}))
    out.append(("read files", {"sql": "SELECT * FROM file('facts.csv', 'CSV', 'tenant_id String')"}))
    out.append(("drop", {"command": f"DROP TABLE {db}.capacity_facts"}))
    out.append(("delete", {"command": f"ALTER TABLE {db}.capacity_facts DELETE WHERE tenant_id = '{other}'"}))
    return out


def refused(result: dict) -> bool:
    return "error" in result and any(word in result["error"] for word in REFUSED)


def assert_tenant_isolated(seen: dict[str, dict], analyst: dict[str, dict], me: str) -> None:
    """``seen``: ``me``'s probe results; ``analyst``: the same probes as the analyst."""
    counts = loaded_counts()
    for t in TENANT_FACT_TABLES:
        assert seen[f"by_tenant {t}"] == {"rows": [[me, counts[t][me]]]}, t
        assert seen[f"other {t}"] == {"rows": [[0]]}, f"{me} read another tenant's rows of {t}"
        assert seen[f"not_mine {t}"] == {"rows": [[0]]}, f"{me} read rows of {t} not its own"
    for probe in ("showback capacity", "showback utilization"):
        mine = [r for r in analyst[probe]["rows"] if r[0] == me]
        assert mine and seen[probe] == {"rows": mine}, probe
    assert seen["reference kinds"] == {"rows": [["ratecards"]]}
    for probe in [f"read {t}" for t in DENIED_TABLES] + ["write", "lift readonly", "read files", "drop", "delete"]:
        assert refused(seen[probe]), f"{me}: {probe} was not refused: {seen[probe]}"


def assert_reads_every_tenant(seen: dict[str, dict], who: str) -> None:
    counts = loaded_counts()
    for t in TENANT_FACT_TABLES:
        assert seen[f"by_tenant {t}"] == {"rows": [[k, v] for k, v in sorted(counts[t].items())]}, f"{who}: {t}"
    assert {r[0] for r in seen["showback capacity"]["rows"]} == set(TENANTS)
    assert seen["reference kinds"] == {"rows": [["quotas"], ["ratecards"]]}
    assert seen["read inventory_gpus"] == {"rows": [[1]]}
    for probe in ("write", "drop", "delete", "read processor_checkpoints"):
        assert refused(seen[probe]), f"{who}: {probe} was not refused: {seen[probe]}"
