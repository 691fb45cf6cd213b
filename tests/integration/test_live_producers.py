"""Acceptance: the live producers, each against a server speaking its source's protocol (a real
kube-apiserver and etcd, a kubelet PodResources gRPC socket, a dcgm-exporter /metrics, a model
gateway's access log), publish to the real broker while the request and watch producers are
SIGKILLed and restarted. Then:

- the facts of the live run equal the facts of ingesting the capture it recorded (--record);
- every request of the log is one request fact (nothing lost, nothing twice);
- every transition the API server made is in the watch stream;
- each producer serves its Prometheus metrics.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.request
import uuid

import orjson
import pytest
from gpuledger.sinks.clickhouse import ClickHouseStore
from sources.live_cluster import NODE, WATCH_ENV, Cluster, Producer, inventory, wait_for_bookmark
from stack_support import Stack

pytestmark = pytest.mark.integration

INTERVAL_S = 0.5
REQUESTS = 240


def _request(i: int, now_s: float) -> dict:
    return {"request_id": f"req-{i:05d}", "endpoint_id": "chat-1", "model": "qwen2.5-0.5b", "revision": "r1",
            "tenant_id": "alpha" if i % 3 else "beta", "project_id": "p", "arrived_at": now_s - 0.8,
            "finished_at": now_s, "ttft_s": 0.1, "queue_s": 0.0,
            "usage": {"prompt_tokens": 10 + i % 7, "completion_tokens": 20 + i % 5, "total_tokens": 30 + i % 12},
            "status": 200}


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _request_ids(stack: Stack) -> tuple[list[str], int]:
    store = ClickHouseStore(stack.dsn)
    try:
        _, rows = store.query("SELECT request_id FROM gpuledger.request_facts FINAL ORDER BY request_id")
        _, raw = store.query("SELECT count() - uniqExact(fact_id) FROM gpuledger.request_facts FINAL")
        return [r[0] for r in rows], raw[0][0]
    finally:
        store.close()


def test_live_producers_killed_and_restarted_give_the_facts_of_their_capture(broker, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"live producers: seed {seed}")
    rnd = random.Random(seed)
    env = {"GPULEDGER_CHECKPOINT_INTERVAL_S": "0"}
    live = Stack(tmp_path / "live", f"t{uuid.uuid4().hex[:10]}", env)
    capture, logs = tmp_path / "capture", tmp_path / "logs"
    logs.mkdir()
    inventory_file = tmp_path / "inventory.json"
    inventory_file.write_bytes(orjson.dumps(inventory()))
    live.run("load", "inventory", str(inventory_file), "--cluster", "c1")

    cluster = Cluster(tmp_path)
    kubelet, dcgm = cluster.kubelet, cluster.dcgm
    access_log = tmp_path / "access.jsonl"
    access_log.touch()

    common = ["--cluster", "c1", "--node", NODE, "--interval", str(INTERVAL_S), "--record", str(capture),
              "--metrics-port", "0"]
    producers = {
        "k8s": Producer(live, "k8s", [*common, "--kubeconfig", str(cluster.kubeconfig)], logs,
                        env=WATCH_ENV),
        "podresources": Producer(live, "podresources", [*common, "--socket", str(kubelet.socket_path)], logs),
        "dcgm": Producer(live, "dcgm", [*common, "--dcgm-url", dcgm.url], logs),
        "requests": Producer(live, "requests", [*common, "--log", str(access_log)], logs),
    }
    try:
        for p in producers.values():
            p.start()
        time.sleep(4)  # every producer has started, listed, measured its clock

        # requests are written all along; the request producer is killed at random moments
        def write_requests() -> None:
            with access_log.open("a") as fh:
                for i in range(REQUESTS):
                    fh.write(orjson.dumps(_request(i, time.time())).decode() + "\n")
                    fh.flush()
                    time.sleep(0.02)

        writer = threading.Thread(target=write_requests)
        writer.start()
        kills = []
        for _ in range(3):
            time.sleep(rnd.uniform(0.3, 1.2))
            producers["requests"].kill()
            kills.append("requests")
            producers["requests"].start()
        writer.join()

        # the cluster changes: train-1 ends and its GPUs go to a new pod; the watch producer is
        # killed between changes and resumes from its saved resourceVersion
        time.sleep(1.0)
        producers["k8s"].kill()
        kills.append("k8s")
        cluster.replace_training_pod()
        time.sleep(1.0)
        producers["k8s"].start()
        time.sleep(3.0)
        cluster.finish_serving_pod()
        time.sleep(3.0)
        wait_for_bookmark(capture, time.time() + 1)  # quiet: the last watch lines are bookmarks

        urls = {name: p.metrics_url() for name, p in producers.items()}
        scraped = {name: _scrape(url) for name, url in urls.items() if url}
        for p in producers.values():
            assert p.terminate() == 0, p.stderr()[-3000:]
    finally:
        for p in producers.values():
            if p.proc is not None and p.proc.poll() is None:
                p.kill()
        cluster.stop()

    # each producer served its metrics: records sent, by file
    assert set(scraped) == set(producers), {n: p.stderr()[-1500:] for n, p in producers.items()}
    for name, text in scraped.items():
        assert 'gpuledger_producer_records_total{file="' in text and f'source="{name}"' in text, text[:2000]
        assert "gpuledger_producer_clock_offset_seconds" in text

    # the live run's facts
    live.run("process", "--until-caught-up")
    live_facts = live.facts(with_source=False)
    ids, duplicated = _request_ids(live)
    assert ids == [f"req-{i:05d}" for i in range(REQUESTS)]  # nothing lost across the kills
    assert duplicated == 0
    store = ClickHouseStore(live.dsn)
    try:
        _, held_by = store.query("SELECT DISTINCT tenant_id, pod_name FROM gpuledger.capacity_facts FINAL "
                                 "WHERE kind = 'allocated' ORDER BY tenant_id, pod_name")
    finally:
        store.close()
    # the pods that held GPUs, each under its namespace's tenant, across the changes
    assert [tuple(r) for r in held_by] == [("alpha", "train-1"), ("alpha", "train-2"), ("beta", "serve-1")]

    # every transition of the API server is in the recorded watch stream, at its resourceVersion;
    # the deletion of a bound pod marks it (MODIFIED, with a deletionTimestamp) before removing it
    recorded = [orjson.loads(line)["event"] for line in (capture / "k8s-watch.jsonl").read_bytes().splitlines()]
    seen = {(e["type"], e["object"]["metadata"].get("uid"), e["object"]["metadata"].get("resourceVersion"))
            for e in recorded}
    for t, obj in [*(("ADDED", p) for p in cluster.listed), *cluster.changes]:
        assert (t, obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]) in seen, (t, obj["metadata"]["name"])
    assert any(e["type"] == "MODIFIED" and e["object"]["metadata"].get("deletionTimestamp")
               and e["object"]["metadata"]["uid"] == cluster.p1["metadata"]["uid"] for e in recorded)

    # ingesting what the live producers recorded gives the same facts
    again = Stack(tmp_path / "again", f"t{uuid.uuid4().hex[:10]}", env)
    again.run("load", "inventory", str(inventory_file), "--cluster", "c1")
    again.run("ingest", str(capture))
    again.run("process", "--until-caught-up")
    assert again.facts(with_source=False) == live_facts
    assert _request_ids(again) == (ids, 0)
    print(f"live producers: kills {kills}, {len(live_facts['capacity_facts'])} capacity and "
          f"{len(live_facts['utilization_facts'])} utilization facts equal to the capture's")
