"""Fault suite, bad input: a seeded, fuzzed corpus — truncated and wrong-shaped lines of every
capture file, broken exposition text, broken PodResources responses and watch objects, bad
request lines, and truncated, mis-framed and wrong-schema Avro published straight to the
source topics, plus the shapes and values that once stopped ingest (a watch object's
metadata that is not an object, PodResources containers, devices or deviceIds of the wrong
shape, event times before 2000 or far ahead, token counts beyond 2^31). Every bad record
ends in the dead-letter topic with a reason, the worker does not crash, the good records
give exactly the clean run's facts, and the input adds up: records = applied +
dead-lettered; samples = attributed + unattributed."""

from __future__ import annotations

import random
import uuid

import orjson
import pytest

from captures import append_lines
from gpuledger.demo.cluster import write_capture
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.schemas import Codec
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.progress import job_checkpoint
from gpuledger.bus.changelog import Changelog
from gpuledger.bus.topics import Topics
from plans import truth_plan
from stack_support import BOOTSTRAP, Stack, dead_letters

pytestmark = pytest.mark.integration

RNG = random.Random(20261130)


def _lines(path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()] if path.exists() else []


def _truncated(line: dict) -> str:
    raw = orjson.dumps(line).decode()
    return raw[:RNG.randrange(1, len(raw) - 1)]


def _corrupt_exposition(text: str) -> str:
    lines = text.splitlines()
    metric = [i for i, x in enumerate(lines) if x and not x.startswith("#")]
    i = RNG.choice(metric)
    if RNG.random() < 0.5:
        lines[i] = lines[i].replace("}", "", 1)  # unterminated label set
    else:
        lines[i] = lines[i].rsplit(" ", 1)[0] + " twelve"  # a value that is not a number
    return "\n".join(lines) + "\n"


def _corpus(capture) -> dict[str, list[str]]:
    watch, pr = _lines(capture / "k8s-watch.jsonl"), _lines(capture / "podresources.jsonl")
    dcgm, req = _lines(capture / "dcgm.jsonl"), _lines(capture / "requests.jsonl")
    pods = [w for w in watch if w["event"]["type"] != "BOOKMARK"]
    bad: dict[str, list[str]] = {}
    bad["k8s-watch.jsonl"] = [_truncated(RNG.choice(watch)) for _ in range(5)] + [
        orjson.dumps({**RNG.choice(pods), "observed_at": "yesterday"}).decode(),
        orjson.dumps({"observed_at": pods[0]["observed_at"], "event": {"type": "ADDED", "object": {
            **pods[0]["event"]["object"], "kind": "Deployment"}}}).decode(),
        orjson.dumps({"observed_at": pods[0]["observed_at"], "event": {"type": "RESIZED", "object": {}}}).decode(),
        orjson.dumps({"observed_at": pods[1]["observed_at"], "event": {"type": "MODIFIED", "object": {
            **pods[1]["event"]["object"], "metadata": {"name": "no-uid"}}}}).decode(),
        orjson.dumps({**pods[0], "event": {**pods[0]["event"], "object": {
            **pods[0]["event"]["object"], "metadata": RNG.choice(["xyz", ["xyz"], 7])}}}).decode(),
        orjson.dumps({**RNG.choice(pods), "observed_at": RNG.choice(["1969-12-31T23:00:00Z", "2099-01-01T00:00:00Z"])
                      }).decode(),
    ]
    bad["podresources.jsonl"] = [_truncated(RNG.choice(pr)) for _ in range(4)] + [
        orjson.dumps({**RNG.choice(pr), "response": {"podResources": 7}}).decode(),
        orjson.dumps({**RNG.choice(pr), "response": {"podResources": [{"name": "x", "containers": "all"}]}}).decode(),
        orjson.dumps({**RNG.choice(pr), "node": None}).decode(),
        orjson.dumps({**RNG.choice(pr), "response": {"podResources": [
            {"name": "x", "namespace": "y", "containers": RNG.choice(["xyz", [7], [{"devices": [7]}],
                                                                      [{"devices": [{"deviceIds": 5}]}]])}]}}).decode(),
    ]
    bad["dcgm.jsonl"] = [_truncated(RNG.choice(dcgm)) for _ in range(4)] + [
        orjson.dumps({**line, "exposition": _corrupt_exposition(line["exposition"])}).decode()
        for line in RNG.sample(dcgm, 6)]
    good_req = req[0] if req else {"observed_at": dcgm[0]["observed_at"], "endpoint_id": "e", "model": "m",
                                   "request_id": "r", "tenant_id": "t", "arrived_at": dcgm[0]["observed_at"],
                                   "prompt_tokens": 1, "completion_tokens": 1, "outcome": "success"}
    bad["requests.jsonl"] = [orjson.dumps({**good_req, "prompt_tokens": -5}).decode(),
                             orjson.dumps({**good_req, "outcome": "maybe"}).decode(),
                             orjson.dumps({k: v for k, v in good_req.items() if k != "request_id"}).decode(),
                             orjson.dumps({**good_req, "prompt_tokens": 2**63}).decode(),
                             _truncated(good_req)]
    return bad


def _raw_avro(stack: Stack) -> list[tuple[str, bytes]]:
    """Records that reach the topics without ingest: truncated, mis-framed, wrong schema."""
    dcgm = Codec("dcgm_scrape").encode({"observed_at_ms": 1, "ingested_at_ms": 1, "cluster_id": "prod-ai-1",
                                        "node": "node-a", "exposition": "x 1\n"})
    request = Codec("request_event").encode({
        "observed_at_ms": 1, "ingested_at_ms": 1, "cluster_id": "prod-ai-1", "endpoint_id": "e", "model": "m",
        "revision": "", "request_id": "r", "tenant_id": "t", "project_id": "", "arrived_at_ms": 0,
        "prompt_tokens": 1, "completion_tokens": 1, "queue_s": None, "ttft_s": None, "e2e_s": None,
        "outcome": "success"})
    src = f"{stack.prefix}.source"
    return [(f"{src}.dcgm", dcgm[:len(dcgm) // 2]), (f"{src}.dcgm", dcgm[:3]), (f"{src}.dcgm", b"\x07" + dcgm[1:]),
            (f"{src}.dcgm", dcgm[:1] + b"\x00\x00\x00\x63" + dcgm[5:]), (f"{src}.dcgm", request),
            (f"{src}.podresources", dcgm), (f"{src}.k8s-watch", request + b"\x00"), (f"{src}.requests", b"")]


def test_fuzzed_input_is_dead_lettered_and_the_rest_adds_up(broker, tmp_path, record_trial):
    plan = truth_plan(hours=2)
    clean_capture = write_capture(plan, tmp_path / "clean")
    clean = Stack(tmp_path / "clean-home", f"t{uuid.uuid4().hex[:10]}")
    clean.run("ingest", str(clean_capture))
    clean.run("process", "--until-caught-up")

    fuzzed_capture = write_capture(plan, tmp_path / "fuzzed")
    corpus = _corpus(fuzzed_capture)
    for name, lines in corpus.items():
        append_lines(fuzzed_capture, name, lines)
    fuzzed = Stack(tmp_path / "fuzzed-home", f"t{uuid.uuid4().hex[:10]}")
    fuzzed.run("ingest", str(fuzzed_capture))
    raw = _raw_avro(fuzzed)
    pub = KafkaPublisher(BOOTSTRAP)
    for topic, value in raw:
        pub.publish(topic, b"fuzz", value, 1_790_812_800_000)
    pub.flush()
    done = fuzzed.run("process", "--until-caught-up")  # exits 0: no crash
    assert "caught up" in done.stderr

    injected = sum(len(v) for v in corpus.values()) + len(raw)
    dead = dead_letters(f"{fuzzed.prefix}.dead-letter")
    assert len(dead) == injected, "\n".join(f"{d['stage']} {d['source']}: {d['reason']}" for d in dead)
    assert all(d["reason"] and d["source"] for d in dead)
    at_process = [d for d in dead if d["stage"] == "process"]
    assert all("/" in d["source"] and "@" in d["source"] for d in at_process)  # topic/partition@offset
    assert fuzzed.facts(with_source=False) == clean.facts(with_source=False)

    store = ClickHouseStore(fuzzed.dsn)
    try:
        cp = job_checkpoint(store)  # the units' progress rows the sink wrote
    finally:
        store.close()
    changelog = Changelog(BOOTSTRAP, Topics(fuzzed.prefix, 4), None)
    units = [st for st in (changelog.read_unit(n) for n in range(4)) if st]  # the workers' state, from Kafka
    clusters = [u["attributors"]["prod-ai-1"] for u in units if "prod-ai-1" in u["attributors"]]
    counters = {k: sum(c["counters"][k] for c in clusters) for k in clusters[0]["counters"]}
    # the last scrape of each node waits for the next one to say how long it stands
    waiting = sum(len(sc[1]) for c in clusters for st in c["nodes"].values() for sc in st["pending_scrapes"])
    waiting += sum(len(c["guest_pending"]) for c in clusters)
    assert 0 < waiting <= 8  # 2 nodes x 4 GPUs at most
    assert counters["samples"] == counters["samples_attributed"] + counters["samples_unattributed"] + waiting
    read = sum(cp.offsets.values()) - sum(cp.state["first_offsets"].values())
    applied = read - cp.state["dead_lettered"]
    assert cp.state["dead_lettered"] == len(at_process) and applied > 0
    record_trial(trial="fuzzed corpus", fault=f"{injected} bad records", at="ingest + topics",
                 outcome=f"{len(dead) - len(at_process)} at ingest, {len(at_process)} at process",
                 facts=sum(len(v) for v in fuzzed.facts(with_source=False).values()), lost=0, duplicated=0)
