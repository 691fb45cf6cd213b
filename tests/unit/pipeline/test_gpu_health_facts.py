"""Health facts and incidents through the pipeline on the in-memory twins: every scrape of a
GPU gives a health fact, an injected XID 79 and a double-bit ECC error give critical incidents
on the GPU they were injected on, once, and a checkpoint restore does not raise them again."""

from gpuledger.demo.cluster import write_capture
from health_scrapes import Fault, HealthScrapes
from pipeline import MemoryPipeline, ingest, partitioned
from plans import M, T0, truth_plan


def _scenario(tmp_path):
    plan = truth_plan(hours=1)
    a1, a2 = plan.nodes["node-a"][1].uuid, plan.nodes["node-a"][2].uuid
    b0 = plan.nodes["node-b"][0].uuid
    scrapes = HealthScrapes(faults=[
        Fault(a2, "DCGM_FI_DEV_XID_ERRORS", "79", T0 + 30 * M),
        Fault(a1, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "2", T0 + 35 * M),
        Fault(a1, "DCGM_FI_DEV_XID_ERRORS", "48", T0 + 35 * M),
        Fault(b0, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "32", T0 + 40 * M, T0 + 45 * M),  # SW thermal, 5 min
        Fault(b0, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "128", T0 + 50 * M, T0 + 50 * M + 30_000),  # too short
    ])
    capture = write_capture(plan, tmp_path / "capture")
    count = scrapes.rewrite(capture)
    topics, pub, _ = ingest(capture)
    return plan, topics, partitioned(topics, pub.records), count


def test_injected_xid_79_and_dbe_are_critical_incidents_on_the_right_gpu(tmp_path):
    plan, topics, records, scrapes = _scenario(tmp_path)
    mp = MemoryPipeline(topics)
    mp.extents(records)
    mp.feed(records)
    assert not mp.dead
    node_of = {g.uuid: g.node for gpus in plan.nodes.values() for g in gpus}
    health = list(mp.store.health.values())
    # every GPU of every scrape, minus GPU a0's telemetry gap (its series are not in those scrapes)
    assert len(health) == len({(f.gpu_uuid, f.observed_at_ms) for f in health})  # one per GPU and scrape
    assert {f.node for f in health} == {"node-a", "node-b"} and all(f.node == node_of[f.gpu_uuid] for f in health)
    assert len(health) >= scrapes * 3  # at least 3 GPUs a scrape (a0 drops out in its gap)
    got = sorted((i.node, i.gpu_uuid, i.kind, i.code, i.severity, i.observed_at_ms - T0)
                 for i in mp.store.health_incidents.values())
    a1, a2 = plan.nodes["node-a"][1].uuid, plan.nodes["node-a"][2].uuid
    b0 = plan.nodes["node-b"][0].uuid
    first = {k: min(f.observed_at_ms for f in health if f.gpu_uuid == g and f.observed_at_ms >= T0 + m * M) - T0
             for k, g, m in (("xid", a2, 30), ("dbe", a1, 35), ("thermal", b0, 40))}
    assert got == sorted([
        ("node-a", a2, "xid", 79, "critical", first["xid"]),
        ("node-a", a1, "ecc_dbe", 2, "critical", first["dbe"]),
        ("node-a", a1, "xid", 48, "critical", first["dbe"]),
        ("node-b", b0, "thermal_throttle", 32, "warning",
         min(f.observed_at_ms for f in health if f.gpu_uuid == b0 and f.observed_at_ms >= T0 + first["thermal"] + M)
         - T0),
    ])
    by_id = mp.store.health
    assert all(by_id[i.health_fact_id].gpu_uuid == i.gpu_uuid for i in mp.store.health_incidents.values())


def test_a_restart_from_the_checkpoint_raises_no_incident_twice(tmp_path):
    _, topics, records, _ = _scenario(tmp_path)
    once = MemoryPipeline(topics)
    once.extents(records)
    once.feed(records)
    half = len(records) // 2
    first = MemoryPipeline(topics)
    first.extents(records)
    first.feed(records[:half])
    again = MemoryPipeline(topics, store=first.store)  # restores the checkpoint the first one wrote
    again.extents(records)
    again.feed(records[half:])
    assert set(again.store.health_incidents) == set(once.store.health_incidents)
    assert set(again.store.health) == set(once.store.health)
