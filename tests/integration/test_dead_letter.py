"""Acceptance: malformed capture lines land in the dead-letter topic with file, line and
reason (at ingest), undecodable or unparsable records with their position (at process);
the rest is processed."""

import orjson
import pytest

from captures import append_lines
from gpuledger.demo.cluster import write_capture
from plans import expected_allocated_hours, truth_plan
from stack_support import dead_letters

pytestmark = pytest.mark.integration

BAD_LINES = {
    "k8s-watch.jsonl": ['{"observed_at": "2026-10-01T00:00:00Z", "event": {"type": "ADDED", "object": {"kind": "Pod"',
                        '{"observed_at": "yesterday", "event": {"type": "ADDED", "object": {}}}'],
    "podresources.jsonl": ['{"observed_at": "2026-10-01T00:00:30Z", "response": {"podResources": []}}',
                           '{"observed_at": "2026-10-01T00:00:30Z", "node": "node-a", "response": {"podResources": 7}}'],
    "dcgm.jsonl": [orjson.dumps({"observed_at": "2026-10-01T00:00:05Z", "node": "node-a",
                                 "exposition": 'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-x" 0.5\n'}).decode()],
}


def test_bad_lines_are_dead_lettered_with_reasons_and_the_rest_is_processed(stack, tmp_path):
    plan = truth_plan()
    cap = write_capture(plan, tmp_path / "capture")
    lines_before = {name: len((cap / name).read_text().splitlines()) for name in BAD_LINES}
    for name, lines in BAD_LINES.items():
        append_lines(cap, name, lines)
    ingest = stack.run("ingest", str(cap))
    assert "rejected (dead-lettered) lines: 4" in ingest.stdout
    stack.run("process", "--until-caught-up")

    dead = dead_letters(f"{stack.prefix}.dead-letter")
    by_source = {d["source"]: d for d in dead}
    k8s, pr = lines_before["k8s-watch.jsonl"], lines_before["podresources.jsonl"]
    assert "not JSON" in by_source[f"k8s-watch.jsonl:{k8s + 1}"]["reason"]
    assert "observed_at" in by_source[f"k8s-watch.jsonl:{k8s + 2}"]["reason"]
    assert by_source[f"podresources.jsonl:{pr + 1}"]["reason"].startswith("node:")
    assert "podResources must be a list" in by_source[f"podresources.jsonl:{pr + 2}"]["reason"]
    assert all(d["stage"] == "ingest" and d["raw"] for d in dead if ".jsonl:" in d["source"])
    processing = [d for d in dead if d["stage"] == "process"]
    assert len(processing) == 1
    assert processing[0]["source"].startswith(f"{stack.prefix}.source.dcgm/")
    assert "unterminated label set" in processing[0]["reason"]

    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    got = {t["tenant_id"]: t["allocated_gpu_hours"] for t in doc["tenants"]}
    assert got == pytest.approx(expected_allocated_hours(plan), abs=1e-6)
