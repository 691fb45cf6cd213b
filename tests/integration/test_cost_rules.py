"""Cost rules tenants cannot move. A pod label any tenant can set does not decide who pays:
capacity moves to a shared endpoint's callers only where the endpoints document declares it
(the owning tenant, the namespaces allowed to serve it); anything else stays with the tenant
holding it and is reported with the reason. Rate cards apply to the cluster they were
published for only. Run through the pipeline into the real engine, then the showback."""

from dataclasses import replace

import orjson
import pytest

from gpuledger.demo.builder import GpuSpec, det_uuid, gpu_uuid
from gpuledger.demo.cluster import NamespacePlan, PodPlan, write_capture
from gpuledger.domain.facts import CapacityFact, FactBatch
from gpuledger.domain.showback import build_showback
from gpuledger.producers.capture import load_reference
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.showback_sql import ClusterScopeError, read_showback_rows
from pipeline import WALL_MS, MemoryPipeline, ingest, partitioned
from plans import H, SERVICE_SHARE_HOURS, T0, service_plan

pytestmark = pytest.mark.integration
END = T0 + 3 * H


def _showback(plan, tmp_path, documents: tuple = (), extra_facts: FactBatch | None = None) -> dict:
    """The showback of ``plan`` run through the pipeline, with reference ``documents``
    (cluster, kind, document) published after the capture."""
    capture = write_capture(plan, tmp_path / "capture")
    topics, pub, _ = ingest(capture)
    for i, (cluster, kind, doc) in enumerate(documents):
        path = tmp_path / f"{kind}-{i}.json"
        path.write_bytes(orjson.dumps(doc))
        load_reference(path, kind, cluster, pub, topics, lambda i=i: WALL_MS + 60_000 * (i + 1))  # after the capture's
    store = ClickHouseStore(f"chdb://{tmp_path / 'clickhouse'}")
    try:
        store.ensure_schema()
        records = partitioned(topics, pub.records)
        mp = MemoryPipeline(topics, store=store)
        mp.extents(records)
        mp.feed(records)
        if extra_facts is not None:
            store.write_facts(extra_facts)
        return build_showback(read_showback_rows(store, T0, END))
    finally:
        store.close()


def _with_label_squatters(plan):
    """mallory labels its own pod with the shared endpoint's name; ml-platform serves it from a
    namespace the declaration does not allow."""
    node_m = [GpuSpec(gpu_uuid("squat", i), "node-m", i) for i in range(2)]
    namespaces = [*plan.namespaces,
                  NamespacePlan("mallory-ns", det_uuid("ns", "mallory"), T0 - H, ((T0 - H, "mallory"),)),
                  NamespacePlan("platform-lab", det_uuid("ns", "lab"), T0 - H, ((T0 - H, "ml-platform"),))]
    pods = [*plan.pods,
            PodPlan("mallory-ns", "fake-llm-0", det_uuid("pod", "mallory"), "node-m", (0,), T0, END, 0.9,
                    endpoint="chat-llm"),
            PodPlan("platform-lab", "lab-llm-0", det_uuid("pod", "lab"), "node-m", (1,), T0, END, 0.9,
                    endpoint="chat-llm")]
    declared = [{"endpoint_id": "chat-llm", "owner_tenant_id": "ml-platform", "namespaces": ["platform-ns"],
                 "valid_from": "2026-10-01T00:00:00Z", "valid_to": None}]
    return replace(plan, nodes={**plan.nodes, "node-m": node_m}, namespaces=namespaces, pods=pods, endpoints=declared)


def test_a_label_does_not_move_cost_unless_declared(tmp_path):
    doc = _showback(_with_label_squatters(service_plan()), tmp_path)
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    (ep,) = doc["endpoints"]
    assert (ep["endpoint_id"], ep["owner_tenant_id"]) == ("chat-llm", "ml-platform")
    assert ep["allocated_gpu_hours"] == pytest.approx(6.0, abs=1e-9)  # the declared pod's 2 GPUs x 3 h only
    shares = {s["tenant_id"]: s["gpu_hours"] for s in ep["shares"]}
    assert shares == pytest.approx(SERVICE_SHARE_HOURS, abs=1e-6)  # as if nobody squatted the label
    refusals = {(r["tenant_id"], r["namespace"]): r for r in doc["endpoint_refusals"]}
    assert set(refusals) == {("mallory", "mallory-ns"), ("ml-platform", "platform-lab")}
    assert refusals[("mallory", "mallory-ns")]["reason"] == "endpoint 'chat-llm' is owned by 'ml-platform', not by 'mallory'"
    assert refusals[("ml-platform", "platform-lab")]["reason"] == "namespace 'platform-lab' may not serve endpoint 'chat-llm'"
    assert all(r["allocated_gpu_hours"] == pytest.approx(3.0, abs=1e-9) for r in refusals.values())
    assert tenants["mallory"]["allocated_gpu_hours"] == pytest.approx(3.0, abs=1e-9)  # mallory pays for its own GPU
    assert tenants["mallory"]["endpoint_recovered_gpu_hours"] == 0
    assert tenants["ml-platform"]["endpoint_recovered_gpu_hours"] == pytest.approx(6.0, abs=1e-6)


def test_without_a_declaration_nothing_is_shared_out(tmp_path):
    doc = _showback(replace(service_plan(), endpoints=[]), tmp_path)
    assert doc["endpoints"] == []
    (refusal,) = doc["endpoint_refusals"]
    assert refusal["reason"] == "endpoint 'chat-llm' is not declared in the endpoints document"
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    assert tenants["ml-platform"]["endpoint_recovered_gpu_hours"] == 0
    assert tenants["alpha"]["service_share_gpu_hours"] == 0


def _zero_card(plan) -> list[dict]:
    card = dict(plan.ratecards[0], version="free-for-all", valid_from="2026-10-01T00:00:00Z")
    return [dict(card, gpu_hour={"H100-80GB": {"guaranteed": 0, "borrowed": 0}},
                 per_million_tokens={"input": 0, "output": 0})]


def test_a_rate_card_of_another_cluster_prices_nothing_here(tmp_path):
    plan = service_plan()
    honest = _showback(plan, tmp_path / "honest")
    forged = _showback(plan, tmp_path / "forged", documents=[("made-up-cluster", "ratecards", _zero_card(plan))])
    assert forged["ratecard_version"] == honest["ratecard_version"] == "2026-10-v1"
    (ep,) = forged["endpoints"]
    assert ep["cost"] == 24.00
    assert [t.get("cost") for t in forged["tenants"]] == [t.get("cost") for t in honest["tenants"]]
    own = _showback(plan, tmp_path / "own", documents=[(plan.cluster_id, "ratecards", _zero_card(plan))])
    assert own["ratecard_version"] == "free-for-all"  # the same card for this cluster does apply


def test_evidence_of_two_clusters_is_refused_rather_than_priced_by_one_card(tmp_path):
    plan = service_plan()
    stray = CapacityFact(
        fact_id="other-cluster-1", cluster_id="prod-ai-2", kind="allocated", gpu_uuid="GPU-x", device_id="GPU-x",
        node="n", gpu_class="H100-80GB", mode="exclusive", profile="", capacity_fraction=1.0, valid_from_ms=T0,
        valid_to_ms=T0 + H, tenant_id="alpha", project_id="", cost_center="", namespace="a", namespace_uid="u",
        pod_name="p", pod_uid="pu", container="", endpoint_id="", workload_kind="pod", confidence="high", reason="",
        src_topic="t", src_partition=0, src_offset=0)
    with pytest.raises(ClusterScopeError, match="prod-ai-1, prod-ai-2"):
        _showback(plan, tmp_path, extra_facts=FactBatch(capacity=[stray]))


def test_requests_split_by_the_endpoint_owner_s_guaranteed_and_borrowed_capacity(tmp_path):
    # ml-platform serves chat-llm on 2 GPUs for the 3 hours; with a quota of 1 GPU, half of what
    # it held each hour was borrowed, so half of every consumer's successful requests ran on
    # borrowed capacity. Without a quota everything it held was borrowed.
    plan = service_plan()
    quota = [{"tenant_id": "ml-platform", "gpu_class": "H100-80GB", "guaranteed_gpus": 1,
              "valid_from": "2026-10-01T00:00:00Z"}]
    doc = _showback(plan, tmp_path / "quota", documents=[(plan.cluster_id, "quotas", quota)])
    owner = next(t for t in doc["tenants"] if t["tenant_id"] == "ml-platform")
    assert owner["guaranteed_gpu_hours"] == pytest.approx(3.0) and owner["borrowed_gpu_hours"] == pytest.approx(3.0)
    served = {t["tenant_id"]: t["productive_by_capacity"] for t in doc["tenants"] if t["productive_by_capacity"]}
    assert set(served) == {"alpha", "beta", "gamma"}
    for tenant, block in served.items():
        ok = next(t["successful_requests"] for t in doc["tenants"] if t["tenant_id"] == tenant)
        assert ok > 0
        assert block["guaranteed"]["successful_requests"] == pytest.approx(ok / 2)
        assert block["borrowed"]["successful_requests"] == pytest.approx(ok / 2)
        assert block["unknown"]["successful_requests"] == 0
    none = _showback(plan, tmp_path / "none")
    assert all(t["productive_by_capacity"]["guaranteed"]["successful_requests"] == 0
               for t in none["tenants"] if t["productive_by_capacity"])
