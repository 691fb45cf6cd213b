"""The demo's DCGM scrapes carry the health and thermal fields (demo/health.py): they parse into
health facts with every field set, once a minute; the faults the demo plan injects give its
incidents, on the GPUs and at the times it says, and nothing else does; the attribution
series are those of a scrape without health fields, byte for byte."""

from gpuledger.demo.builder import dcgm_exposition
from gpuledger.demo.cluster import _readings
from gpuledger.demo.plan import demo_plan
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.gpu_health import GpuHealthFact, health_facts
from gpuledger.domain.gpu_incidents import HealthFold
from plans import H, M, T0

FIELDS = [f for f in GpuHealthFact.__dataclass_fields__ if f.endswith(("_total", "_c", "_s", "_bytes"))
          or f in ("xid_last", "clock_event_reasons", "row_remap_failure", "remapped_rows_correctable",
                   "remapped_rows_uncorrectable")]


def test_demo_scrapes_give_health_facts_and_the_injected_incidents():
    plan = demo_plan(T0, 6)
    fold, incidents, due = HealthFold(), [], 0
    for t in range(T0, T0 + 3 * H + 5 * M, plan.scrape_every_ms):
        for node in ("gpu-node-3", "gpu-node-4"):
            pods = [p for p in plan.pods if p.node == node]
            readings = [r for g in plan.nodes[node] for r in _readings(plan, pods, g, t)]
            text = dcgm_exposition(node, readings, t, plan.health)
            assert text.startswith(dcgm_exposition(node, readings, t))  # health series added after, nothing else
            facts = health_facts(plan.cluster_id, node, t, text, SourcePos("dcgm", 0, 0))
            assert {f.gpu_uuid for f in facts} == {g.uuid for g in plan.nodes[node]}
            if t % 60_000 == 0:
                due += 1
                assert all(getattr(f, name) is not None for f in facts for name in FIELDS)
                assert all(f.fb_free_bytes == max(0, f.fb_total_bytes - f.fb_reserved_bytes - f.fb_used_bytes)
                           for f in facts)
                assert all(30 <= f.gpu_temp_c <= 90 for f in facts)
            else:  # framebuffer used alone, as the attribution series carry it
                assert all(f.gpu_temp_c is None and f.fb_used_bytes is not None for f in facts)
            for f in facts:
                incidents += fold.observe(f)
    assert due == 2 * (3 * 60 + 5)
    hot, bad = plan.nodes["gpu-node-3"][7].uuid, plan.nodes["gpu-node-4"][7].uuid
    got = sorted((i.observed_at_ms - T0, i.node, i.gpu_uuid, i.kind, i.code, i.severity) for i in incidents)
    assert got == [(2 * H + M, "gpu-node-3", hot, "thermal_throttle", 0x20, "warning"),
                   (2 * H + 40 * M, "gpu-node-4", bad, "ecc_dbe", 1, "critical"),
                   (2 * H + 40 * M, "gpu-node-4", bad, "row_remap_pending", 1, "warning"),
                   (3 * H, "gpu-node-4", bad, "xid", 79, "critical")]

