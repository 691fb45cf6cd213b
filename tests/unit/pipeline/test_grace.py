"""Beyond the grace period a silent node's samples are judged without it, with the reason.
Its last snapshot still stands for one cadence (30 s here): the samples in it are attributed."""

from captures import split_lines
from gpuledger.demo.cluster import write_capture
from gpuledger.domain.timeutil import parse_rfc3339_ms
from pipeline import run_capture
from plans import truth_plan

SILENT_FROM = parse_rfc3339_ms("2026-10-01T01:00:00Z")
CADENCE_MS = 30_000


def _node_b_after(line: dict) -> bool:
    return line["node"] == "node-b" and parse_rfc3339_ms(line["observed_at"]) > SILENT_FROM


def _run(tmp_path, grace_ms: int):
    plan = truth_plan()
    full = write_capture(plan, tmp_path / "full")
    split_lines(full, tmp_path / "early", tmp_path / "late", "podresources.jsonl", _node_b_after)
    mp, _ = run_capture(tmp_path / "early", grace_ms)
    b = {g.uuid for g in plan.nodes["node-b"]}
    after = [u for u in mp.store.utilization.values() if u.gpu_uuid in b and u.observed_at_ms > SILENT_FROM]
    return [u for u in after if u.observed_at_ms >= SILENT_FROM + CADENCE_MS], mp, after


def test_node_silent_longer_than_grace_leaves_samples_unattributed_with_reason(tmp_path):
    judged, _, after = _run(tmp_path, grace_ms=120_000)
    last_cadence = [u for u in after if u.observed_at_ms < SILENT_FROM + CADENCE_MS]
    assert len(last_cadence) == 4 * 2 and {u.reason for u in last_cadence} <= {"", "device unallocated"}
    assert judged, "node-a's snapshots ran 2 h past node-b's: beyond a 120 s grace"
    assert {u.reason for u in judged} == {"no PodResources snapshot of node-b within 120s grace"}
    assert {u.confidence for u in judged} == {"unattributed"}


def test_within_grace_samples_wait(tmp_path):
    judged, mp, _ = _run(tmp_path, grace_ms=3 * 3_600_000)
    assert judged == []
    assert mp.proc.attributors["prod-ai-1"].pending_samples() > 0
