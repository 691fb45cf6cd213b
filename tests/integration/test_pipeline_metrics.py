"""Pipeline and fleet metrics on the real broker, the worker, the sink and the ClickHouse engine.

The capture is tests/plans.py's truth plan (2 nodes x 4 H100, quotas alpha 1 and gamma 2)
with what the business alerts look for, known by construction in the window 45..60 min:

- namespace ``mystery`` has no tenant label; its pod holds GPU b3 40..100 min (unattributed);
- alpha's ``idle-0`` holds GPU a3 30..90 min at 1% SM-active (idle);
- GPU a2 (alpha's ``eval-0``) has no DCGM series 44..62 min (a GPU not reporting);
- GPU b2 is unavailable 40..100 min for ``xid-79 fallen off the bus``;
- endpoints ``slow-chat`` (38 requests queued 4 s, TTFT 6 s, plus 2 failed fast ones) and
  ``fast-chat`` (40 requests, 0.05 s, 0.2 s) finish requests 45..58 min.

So at 60 min: alpha holds 4 GPUs (train-0 2, eval-0 1, idle-0 1), 1 guaranteed and 3 borrowed;
beta holds 2 (notebook-0, trainer-0), both borrowed; H100 lendable = 8 - 1 unavailable - 3
guaranteed = 4 < 5 borrowed. One garbage record on the DCGM topic is dead-lettered.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from gpuledger.demo.builder import det_uuid
from gpuledger.demo.cluster import NamespacePlan, write_capture
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms
from gpuledger.sinks.fleet_metrics import FleetExporter, read_fleet, serve_fleet_metrics
from gpuledger.sinks.query import open_reader
from gpuledger.stack.kafka import free_port
from gpuledger.bus.topics import Topics, read_extents
from plans import H, M, T0, pod, truth_plan
from stack_support import BOOTSTRAP, REPO, Stack, stop, wait_for

pytestmark = pytest.mark.integration

RULES = REPO / "deploy/prometheus/rules/gpuledger.rules.yml"
C = "prod-ai-1"
FILE_TOPIC = {"k8s-watch.jsonl": "k8s-watch", "podresources.jsonl": "podresources", "dcgm.jsonl": "dcgm",
              "requests.jsonl": "requests"}


def alert_plan():
    plan = truth_plan()
    a, b = plan.nodes["node-a"], plan.nodes["node-b"]
    plan.namespaces.append(NamespacePlan("mystery", det_uuid("ns", "mystery"), T0 - 24 * H, ((T0 - 24 * H, None),)))
    plan.pods += [pod("mystery", "job-0", "node-b", (3,), 40, 100, 0.6),
                  pod("alpha-ns", "idle-0", "node-a", (3,), 30, 90, 0.01)]
    plan.telemetry_gaps.append((a[2].uuid, T0 + 44 * M, T0 + 62 * M))
    plan.unavailable.append((b[2].uuid, T0 + 40 * M, T0 + 100 * M, "xid-79 fallen off the bus"))
    for endpoint in ("slow-chat", "fast-chat"):
        for i in range(40):
            t = T0 + 45 * M + i * 20_000
            slow, failed = endpoint == "slow-chat", endpoint == "slow-chat" and i < 2
            plan.requests.append({
                "observed_at": format_rfc3339(t), "endpoint_id": endpoint, "model": "llama-3.1-8b", "revision": "r1",
                "request_id": f"{endpoint}-{i}", "tenant_id": "alpha", "project_id": "alpha-app",
                "arrived_at": format_rfc3339(t - 9_000), "prompt_tokens": 100, "completion_tokens": 50,
                "queue_s": 0.1 if failed else (4.0 if slow else 0.05),
                "ttft_s": 0.3 if failed else (6.0 if slow else 0.2),
                "e2e_s": 8.0, "outcome": "error" if failed else "success"})
    return plan


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def by_name(samples: dict, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


@pytest.fixture(scope="module")
def run(broker, tmp_path_factory):
    base = tmp_path_factory.mktemp("metrics")
    port = free_port()
    stack = Stack(base / "home", f"t{uuid.uuid4().hex[:10]}", {"GPULEDGER_WORKER_METRICS_PORT": str(port)})
    cap = write_capture(alert_plan(), base / "capture")
    stack.run("ingest", str(cap))
    topics = Topics(stack.prefix, 4)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    producer.produce(topics.dcgm.name, b"not avro at all", key=b"node-x")
    assert producer.flush(30) == 0
    extents = read_extents(BOOTSTRAP, [t.name for t in topics.processed()])
    total = sum(high - low for low, high in extents.values())
    url = f"http://127.0.0.1:{port}/metrics"
    worker = stack.start("process")
    halt, serving = threading.Event(), None
    try:
        def caught_up() -> bool:
            try:
                m = scrape(url)
            except OSError:
                return False
            lag = by_name(m, "gpuledger_worker_consumer_lag_records")
            return (sum(by_name(m, "gpuledger_worker_records_total").values()) == total and len(lag) == len(extents)
                    and not any(lag.values()))
        wait_for(caught_up, 600, "the worker to consume every record")
        time.sleep(1.5)  # one more housekeeping tick
        metrics = scrape(url)
        reader = open_reader(stack.home, stack.dsn)  # the running worker answers for the engine
        counts = {t: reader.query(f"SELECT count() FROM gpuledger.{t} FINAL")[1][0][0]
                  for t in ("capacity_facts", "utilization_facts", "request_facts", "demand_facts")}
        fleet_end, fleet = read_fleet(reader, T0 + 60 * M)
        exporter = FleetExporter(lambda: open_reader(stack.home, stack.dsn))
        assert exporter.refresh(T0 + 60 * M)
        exposed = scrape(f"http://127.0.0.1:{exporter.serve(0)}/metrics")
        exporter.close()
        served_port = free_port()
        serving = threading.Thread(target=serve_fleet_metrics, args=(stack_settings(stack), served_port, 0.5, halt))
        serving.start()
        wait_for(lambda: _answers(f"http://127.0.0.1:{served_port}/metrics"), 60, "serve_fleet_metrics")
        served = scrape(f"http://127.0.0.1:{served_port}/metrics")
    finally:
        halt.set()
        stop(worker)
        if serving is not None:
            serving.join(30)
    return {"cap": cap, "extents": extents, "metrics": metrics, "counts": counts, "fleet": fleet,
            "fleet_end": fleet_end, "exposed": exposed, "served": served, "topics": topics}


def stack_settings(stack: Stack):
    from gpuledger.config import load_settings  # noqa: PLC0415

    return load_settings(home=stack.home, clickhouse_dsn=stack.dsn, kafka_bootstrap=BOOTSTRAP,
                         topic_prefix=stack.prefix)


def _answers(url: str) -> bool:
    try:
        return scrape(url)[("gpuledger_fleet_last_refresh_timestamp_seconds", frozenset())] > 0
    except OSError:
        return False


def labels(**kw) -> frozenset:
    return frozenset(kw.items())


def test_records_consumed_per_topic_match_the_topics(run):
    got = by_name(run["metrics"], "gpuledger_worker_records_total")
    per_topic: dict[str, int] = {}
    for key, (low, high) in run["extents"].items():
        per_topic[key.rsplit(":", 1)[0]] = per_topic.get(key.rsplit(":", 1)[0], 0) + high - low
    assert {dict(k)["topic"]: v for k, v in got.items()} == {t: n for t, n in per_topic.items() if n}


def test_facts_written_per_table_match_the_store(run):
    got = {dict(k)["table"]: v for k, v in by_name(run["metrics"], "gpuledger_worker_facts_written_total").items()}
    assert got == run["counts"] and got["capacity_facts"] > 0 and got["request_facts"] == 80


def test_the_garbage_record_is_one_dead_letter_of_its_class(run):
    got = by_name(run["metrics"], "gpuledger_worker_dead_letters_total")
    assert got == {labels(stage="process", reason="CodecError"): 1.0}


def test_lag_is_zero_on_every_partition_once_caught_up(run):
    lag = by_name(run["metrics"], "gpuledger_worker_consumer_lag_records")
    assert {(dict(k)["topic"], dict(k)["partition"]) for k in lag} == {
        (k.rsplit(":", 1)[0], k.rsplit(":", 1)[1]) for k in run["extents"]}
    assert set(lag.values()) == {0.0}


def test_last_event_time_per_source_topic_is_the_newest_observation(run):
    want = {}
    for name, short in FILE_TOPIC.items():
        lines = (run["cap"] / name).read_bytes().splitlines()
        want[f"{run['topics'].k8s.name.rsplit('.', 1)[0]}.{short}"] = max(
            parse_rfc3339_ms(orjson.loads(line)["observed_at"]) for line in lines if line) / 1000
    newest = by_name(run["metrics"], "gpuledger_source_last_event_timestamp_seconds")
    got = {dict(k)["topic"]: v for k, v in newest.items()}
    assert got == want


def test_flushes_timed_and_no_store_errors(run):
    m = run["metrics"]
    assert m[("gpuledger_worker_flush_seconds_count", frozenset())] >= 1
    for kind in ("transient", "permanent"):
        assert m[("gpuledger_worker_store_errors_total", frozenset({("kind", kind)}))] == 0
    assert m[("gpuledger_worker_pending_samples", frozenset())] >= 0
    assert m[("gpuledger_worker_last_flush_timestamp_seconds", frozenset())] > 0


FLEET_AT_60_MIN = {
    "gpuledger_fleet_unattributed_gpus": {(C, "namespace_without_tenant"): 1.0},
    "gpuledger_fleet_allocated_gpus": {(C, "alpha"): 4.0, (C, "beta"): 2.0},
    "gpuledger_fleet_idle_allocated_gpus": {(C, "alpha"): 1.0, (C, "beta"): 0.0},
    "gpuledger_fleet_idle_allocated_node_gpus": {(C, "alpha", "node-a"): 1.0, (C, "beta", "node-b"): 0.0},
    "gpuledger_fleet_unknown_activity_gpus": {(C, "alpha"): 1.0, (C, "beta"): 0.0},
    "gpuledger_fleet_gpus_without_telemetry": {(C, "node-a"): 1.0, (C, "node-b"): 0.0},
    "gpuledger_fleet_nodes_without_telemetry": {(C,): 0.0},
    "gpuledger_fleet_unavailable_gpus": {(C, "xid-79 fallen off the bus"): 1.0},
    "gpuledger_fleet_requests": {(C, "fast-chat"): 40.0, (C, "slow-chat"): 40.0},
    "gpuledger_fleet_failed_requests": {(C, "fast-chat"): 0.0, (C, "slow-chat"): 2.0},
    "gpuledger_fleet_request_queue_seconds": {(C, e, q): v for e, v in (("fast-chat", 0.05), ("slow-chat", 4.0))
                                              for q in ("0.5", "0.95", "0.99")},
    "gpuledger_fleet_request_ttft_seconds": {(C, e, q): v for e, v in (("fast-chat", 0.2), ("slow-chat", 6.0))
                                             for q in ("0.5", "0.95", "0.99")},
    "gpuledger_fleet_quota_gpus": {(C, "alpha", "H100-80GB"): 1.0, (C, "gamma", "H100-80GB"): 2.0},
    "gpuledger_fleet_guaranteed_gpus": {(C, "alpha", "H100-80GB"): 1.0, (C, "beta", "H100-80GB"): 0.0},
    "gpuledger_fleet_borrowed_gpus": {(C, "alpha", "H100-80GB"): 3.0, (C, "beta", "H100-80GB"): 2.0},
    "gpuledger_fleet_borrow_limit_gpus": {(C, "alpha", "H100-80GB"): 2.0},
    "gpuledger_fleet_class_gpus": {(C, "H100-80GB"): 8.0},
    "gpuledger_fleet_class_lendable_gpus": {(C, "H100-80GB"): 4.0},
    "gpuledger_fleet_class_borrowed_gpus": {(C, "H100-80GB"): 5.0},
    # no GPU in evidence outside the inventory or the reverse; the plan's scrapes carry no health fields
    "gpuledger_fleet_inventory_mismatch_gpus": {},
    "gpuledger_fleet_gpu_health_incidents": {},
}


def test_every_fleet_gauge_matches_the_plan(run):
    assert run["fleet_end"] == T0 + 60 * M
    assert run["fleet"].keys() == FLEET_AT_60_MIN.keys()
    for name, want in FLEET_AT_60_MIN.items():
        got = run["fleet"][name]
        assert got.keys() == want.keys(), name
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=1e-9), (name, key)


def test_the_exporter_serves_the_gauges(run):
    exposed = run["exposed"]
    assert exposed[("gpuledger_fleet_window_end_timestamp_seconds", frozenset())] == (T0 + 60 * M) / 1000
    unattributed = labels(cluster_id=C, reason="namespace_without_tenant")
    assert exposed[("gpuledger_fleet_unattributed_gpus", unattributed)] == 1.0
    assert exposed[("gpuledger_fleet_request_queue_seconds",
                    labels(cluster_id=C, endpoint_id="slow-chat", quantile="0.95"))] == 4.0


def test_serve_fleet_metrics_ends_its_window_at_the_evidence(run):
    served = run["served"]
    end = served[("gpuledger_fleet_window_end_timestamp_seconds", frozenset())]
    assert end == min(time.time(), (T0 + 3 * H) / 1000)
    assert served[("gpuledger_fleet_refresh_errors_total", frozenset())] == 0
    assert served[("gpuledger_fleet_class_gpus", labels(cluster_id=C, gpu_class="H100-80GB"))] == 8.0


def test_the_rules_fire_on_these_gauges(run, tmp_path):
    """The exported fleet samples, held for 2 hours, through the real rules in promtool."""
    series = []
    for (name, lbls), value in sorted(run["exposed"].items(), key=lambda kv: (kv[0][0], sorted(kv[0][1]))):
        if name.startswith("gpuledger_fleet_") and not name.endswith("_created"):
            inner = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(lbls), "job": "gpuledger-fleet",
                                                                   "instance": "fleet:9103"}.items()))
            series.append({"series": f"{name}{{{inner}}}", "values": f"{value!r}x120"})
    series.append({"series": 'up{instance="worker:9101",job="gpuledger-worker"}', "values": "1x120"})  # scraped, up
    firing = {("AllocationWithoutTenantIdentity", "finance"): 1, ("UnattributedAboveClosePolicy", "finance"): 1,
              ("AllocatedButIdle", "capacity"): 1, ("GpuHealthIncident", "platform"): 2,
              ("InferenceQueueSloBreach", "capacity"): 2, ("BorrowedCapacityNearLimit", "capacity"): 1,
              ("TenantBorrowOverLimit", "capacity"): 1}  # alpha borrows 3 H100s, its limit is 2
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": 'count by (alertname, owner) (ALERTS{alertstate="firing"})', "eval_time": "90m",
                              "exp_samples": [{"labels": f'{{alertname="{a}",owner="{o}"}}', "value": n}
                                              for (a, o), n in firing.items()]}]}]}
    path = tmp_path / "fleet.test.yml"
    path.write_bytes(orjson.dumps(test))  # JSON is YAML
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install -y --no-install-recommends prometheus (`make test` does)"
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
