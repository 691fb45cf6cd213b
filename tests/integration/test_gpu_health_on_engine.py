"""GPU health through the pipeline into the embedded engine: real-format dcgm-exporter scrapes
with health fields become gpu_health_facts; an injected XID 79 and a double-bit ECC error are
critical incidents on the GPU they were injected on; the inventory reconciliation names a GPU
only DCGM knows and an approved GPU no source mentions, in SQL and through `gpuledger inventory
reconcile`; the fleet gauges the alerts read count both."""

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.domain.timeutil import format_rfc3339
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.fleet_metrics import read_fleet
from gpuledger.sinks.health_sql import inventory_reconciliation_sql
from health_scrapes import Fault, HealthScrapes
from pipeline import MemoryPipeline, ingest, partitioned
from plans import H, M, T0, truth_plan
from stack_support import Stack

pytestmark = pytest.mark.integration
STRAY = "GPU-5e1f0000-dead-4bee-8000-00000000beef"


def test_xid_79_and_dbe_become_incidents_on_the_right_gpu_and_the_inventory_is_reconciled(tmp_path):
    plan = truth_plan(hours=1)
    a1, a2 = plan.nodes["node-a"][1].uuid, plan.nodes["node-a"][2].uuid
    b3 = plan.nodes["node-b"][3].uuid  # never allocated: with no health series, no source mentions it
    scrapes = HealthScrapes(
        faults=[Fault(a2, "DCGM_FI_DEV_XID_ERRORS", "79", T0 + 30 * M),
                Fault(a1, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1", T0 + 40 * M)],
        skip={b3},
        extra={"node-b": f'{{gpu="7",UUID="{STRAY}",pci_bus_id="00000000:CA:00.0",device="nvidia7",'
                         'modelName="NVIDIA H100 80GB HBM3",Hostname="node-b"}'})
    capture = write_capture(plan, tmp_path / "capture")
    scrapes.rewrite(capture)
    topics, pub, _ = ingest(capture)
    stack = Stack(tmp_path / "home", "t")  # no topics: the CLI only reads the engine
    store = ClickHouseStore(stack.dsn)
    try:
        store.ensure_schema()
        store.ensure_schema()  # the DDL is safe to run again (every start runs it)
        records = partitioned(topics, pub.records)
        mp = MemoryPipeline(topics, store=store)
        mp.extents(records)
        mp.feed(records)
        assert not mp.dead
        db = store.db
        _, incidents = store.query(f"SELECT node, gpu_uuid, kind, code, severity, observed_at_ms FROM "
                                   f"{db}.gpu_health_incidents FINAL ORDER BY observed_at_ms, kind")
        assert [r[:5] for r in incidents] == [("node-a", a2, "xid", 79, "critical"),
                                              ("node-a", a1, "ecc_dbe", 1, "critical")]
        assert T0 + 30 * M <= incidents[0][5] < T0 + 32 * M and T0 + 40 * M <= incidents[1][5] < T0 + 42 * M
        _, (row,) = store.query(f"SELECT count(), uniqExact(gpu_uuid), min(gpu_temp_c), max(fb_total_bytes), "
                                f"countIf(xid_last = 79) > 0 FROM {db}.gpu_health_facts FINAL")
        assert row[1] == 8 and row[2] == 44.0 and row[3] == 81559 * 2 ** 20 and row[4] == 1  # 7 GPUs + the stray
        _, found = store.query(inventory_reconciliation_sql(db), {"from_ms": T0, "to_ms": T0 + H})
        assert found == [("prod-ai-1", b3, "node-b", "no_evidence", ""),
                         ("prod-ai-1", STRAY, "node-b", "not_in_inventory", "dcgm")], found
        _, samples = read_fleet(store, T0 + H)
        assert samples["gpuledger_fleet_inventory_mismatch_gpus"] == {("prod-ai-1", "no_evidence"): 1.0,
                                                                       ("prod-ai-1", "not_in_inventory"): 1.0}
    finally:
        store.close()
    frm, to = format_rfc3339(T0), format_rfc3339(T0 + H)
    done = stack.run("inventory", "reconcile", "--from", frm, "--to", to, "--format", "json", check=False)
    assert done.returncode == 1, done.stderr[-2000:]  # findings: the command fails, as a check should
    assert orjson.loads(done.stdout) == {
        "format": "gpuledger-inventory-reconciliation/1", "from": frm, "to": to,
        "findings": [{"cluster_id": "prod-ai-1", "gpu_uuid": b3, "node": "node-b", "finding": "no_evidence",
                      "sources": []},
                     {"cluster_id": "prod-ai-1", "gpu_uuid": STRAY, "node": "node-b", "finding": "not_in_inventory",
                      "sources": ["dcgm"]}]}
    table = stack.run("inventory", "reconcile", "--from", frm, "--to", to, check=False)
    assert table.returncode == 1
    head, *lines = table.stdout.splitlines()
    assert head == f"inventory reconciliation {frm} .. {to}: 2 finding(s)"
    assert [line.split() for line in lines] == [["no_evidence", "prod-ai-1", "node-b", b3, "-"],
                                                ["not_in_inventory", "prod-ai-1", "node-b", STRAY, "dcgm"]]
