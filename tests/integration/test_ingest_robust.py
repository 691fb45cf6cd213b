"""Acceptance, on the real broker and engine through the CLI: no record stops ingest.

- Optional identity fields null or missing in vGPU snapshots and request events give the same
  allocation per tenant, every vGPU capacity fact and every request fact, with empty project
  and cost centre.
- A capture mixing good lines with every line that once stopped ``ingest`` (and implausible
  ones) is published: ingest exits 0, each bad line is a dead letter naming its file, line and
  cause, and the good lines give exactly the facts of the capture without the bad lines (the
  good inventory and rate cards, whose files the bad capture replaces, are loaded on their
  own into both deployments)."""

import shutil
import uuid

import orjson
import pytest

from captures import optional_fields, spoil, without_documents
from gpuledger.demo.cluster import write_capture
from gpuledger.sinks.clickhouse import ClickHouseStore
from plans import service_plan
from stack_support import Stack, dead_letters

pytestmark = pytest.mark.integration

FROM, TO = "2026-10-01T00:00:00Z", "2026-10-01T03:00:00Z"


def _query(stack: Stack, sql: str) -> list[tuple]:
    store = ClickHouseStore(stack.dsn)
    try:
        return store.query(sql)[1]
    finally:
        store.close()


def _stack(broker, tmp_path, name: str) -> Stack:
    return Stack(tmp_path / f"home-{name}", f"t{uuid.uuid4().hex[:10]}")


def test_optional_identity_fields_null_or_absent(broker, tmp_path):
    plan = service_plan()
    present = write_capture(plan, tmp_path / "present")
    runs = {}
    for how in ("present", "null", "absent"):
        cap = present if how == "present" else tmp_path / how
        if how != "present":
            shutil.copytree(present, cap)
            optional_fields(cap, how)
        stack = _stack(broker, tmp_path, how)
        ingest = stack.run("ingest", str(cap))
        assert "rejected (dead-lettered) lines: 0" in ingest.stdout, ingest.stdout
        stack.run("process", "--until-caught-up")
        doc = orjson.loads(stack.run("showback", "--from", FROM, "--to", TO, "--format", "json").stdout)
        runs[how] = (
            {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]},
            _query(stack, "SELECT tenant_id, project_id, cost_center, count() FROM gpuledger.capacity_facts FINAL "
                          "WHERE mode = 'vgpu' AND kind = 'allocated' GROUP BY ALL ORDER BY ALL"),
            _query(stack, "SELECT tenant_id, project_id, model, revision, count(), countIf(e2e_s IS NULL) "
                          "FROM gpuledger.request_facts FINAL GROUP BY ALL ORDER BY ALL"),
        )
    allocation, vgpu, requests = runs["present"]
    assert allocation and all(h > 0 for h in allocation.values())
    assert {r[0] for r in vgpu} == {"alpha", "beta", "gamma"} and {r[2] for r in vgpu} == {"cc-alpha", "cc-beta", "cc-gamma"}
    assert sum(r[4] for r in requests) == len(plan.requests) and {r[1] for r in requests} == {"alpha-app", "beta-app",
                                                                                                "gamma-app"}
    for how in ("null", "absent"):
        got_allocation, got_vgpu, got_requests = runs[how]
        assert got_allocation == pytest.approx(allocation, abs=1e-6), how
        # every vGPU capacity fact, now without project and cost centre
        assert got_vgpu == [(t, "", "", sum(r[3] for r in vgpu if r[0] == t)) for t in sorted({r[0] for r in vgpu})]
        # every request fact, without project, model and revision, latencies unknown
        assert sum(r[4] for r in got_requests) == len(plan.requests)
        assert {r[1:4] for r in got_requests} == {("", "", "")}
        assert all(r[4] == r[5] for r in got_requests)


def test_bad_lines_are_dead_letters_and_the_rest_gives_the_clean_facts(broker, tmp_path):
    clean = write_capture(service_plan(), tmp_path / "clean")
    dirty = tmp_path / "dirty"
    shutil.copytree(clean, dirty)
    expected = spoil(dirty)
    documents = without_documents(clean, keep_in=tmp_path / "reference")
    assert set(documents) == {"inventory", "ratecards"}
    cluster = orjson.loads((clean / "manifest.json").read_bytes())["cluster_id"]

    stacks = {name: _stack(broker, tmp_path, name) for name in ("clean", "dirty")}
    facts = {}
    for name, cap in (("clean", clean), ("dirty", dirty)):
        stack = stacks[name]
        for kind, path in documents.items():
            stack.run("load", kind, str(path), "--cluster", cluster)
        ingest = stack.run("ingest", str(cap))  # exits 0: rejections are reported, not failures
        stack.run("process", "--until-caught-up")
        facts[name] = {**stack.facts(), "request_facts": _query(
            stack, "SELECT * REPLACE (replaceOne(src_topic, '" + stack.prefix + ".', '') AS src_topic) "
                   "FROM gpuledger.request_facts FINAL ORDER BY fact_id")}
        if name == "dirty":
            assert f"rejected (dead-lettered) lines: {len(expected)}" in ingest.stdout, ingest.stdout
    assert facts["dirty"] == facts["clean"]
    assert all(facts["clean"][t] for t in ("capacity_facts", "utilization_facts", "request_facts")), \
        {t: len(rows) for t, rows in facts["clean"].items()}

    dead = {d["source"]: d for d in dead_letters(f"{stacks['dirty'].prefix}.dead-letter") if d["stage"] == "ingest"}
    assert set(dead) == set(expected)
    for source, cause in expected.items():
        assert cause in dead[source]["reason"], (source, dead[source]["reason"])
        assert dead[source]["raw"]
