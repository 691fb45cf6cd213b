"""``make bench``: device-samples/s through the attribution path, next to a raw
confluent-kafka consume + Avro decode loop over the same DCGM topic, and the replay of the
capture's month into a shadow database (read, attribute, write, build the ledger document),
in one run.

Both read the same records from the real broker. The attribution path is the real
``gpuledger process --until-caught-up`` (one worker: parsing, as-of join, facts to the fact
topics, changelog commits; the sink: ClickHouse writes), timed from start to exit, start-up
included. Fleet scale: ``bench/fleet.py`` (``make bench-fleet``).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from confluent_kafka import Consumer, TopicPartition

from gpuledger.bus.security import client_config
from gpuledger.cli.main import main as gpuledger
from gpuledger.config import load_settings
from gpuledger.demo.cluster import write_capture
from gpuledger.demo.plan import demo_plan
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.schemas import Codec
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.bus.topics import Topics


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def raw_consume(bootstrap: str, topic: str, partitions: int, expected: int, client: dict | None = None) -> float:
    """Seconds to consume and Avro-decode every record of the topic."""
    codec = Codec("dcgm_scrape")
    consumer = Consumer({"bootstrap.servers": bootstrap, **(client or {}), "group.id": f"bench-raw-{time.time_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, started = 0, time.perf_counter()
    while seen < expected:
        for msg in consumer.consume(1000, timeout=1.0):
            if msg.error():
                continue
            codec.decode(msg.value())
            seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuledger.bench")
    parser.add_argument("--hours", type=int, default=6, help="hours of the demo cluster to push through")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpuledger-bench-"))
    prefix = f"bench{int(time.time())}"
    env = {**os.environ, "GPULEDGER_TOPIC_PREFIX": prefix, "GPULEDGER_CLICKHOUSE_DSN": f"chdb://{base / 'ch'}"}
    s = load_settings(topic_prefix=prefix, clickhouse_dsn=f"chdb://{base / 'ch'}")
    if gpuledger(["stack", "up"], settings=s) != 0:
        return 1
    plan = demo_plan(parse_rfc3339_ms("2026-10-01T00:00:00Z"), args.hours)
    log(f"bench: generating {args.hours} h of {len(plan.all_gpus())} GPUs")
    write_capture(plan, base / "capture", log)
    if gpuledger(["ingest", str(base / "capture")], settings=s) != 0:
        return 1
    topics = Topics(prefix, s.source_partitions)
    records = sum(1 for _ in (base / "capture" / "dcgm.jsonl").open("rb"))

    log("bench: attribution path (gpuledger process --until-caught-up)")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpuledger.cli.main", "process", "--until-caught-up"], env=env, check=True)
    path_s = time.perf_counter() - started
    store = ClickHouseStore(s.effective_dsn())
    samples = store.query("SELECT count() FROM gpuledger.utilization_facts FINAL")[1][0][0]
    store.close()

    log("bench: replay (gpuledger replay --period 2026-10 --into bench_replay)")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpuledger.cli.main", "replay", "--period", "2026-10",
                    "--into", "bench_replay"], env=env, check=True, stdout=subprocess.DEVNULL)
    replay_s = time.perf_counter() - started

    log("bench: raw confluent-kafka consume + Avro decode of the same topic")
    raw_s = raw_consume(s.kafka_bootstrap, topics.dcgm.name, topics.dcgm.partitions, records, client_config(s))
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "hours": args.hours, "gpus": len(plan.all_gpus()), "dcgm_records": records, "device_samples": samples,
        "attribution_s": round(path_s, 2), "attribution_samples_per_s": round(samples / path_s),
        "raw_s": round(raw_s, 2), "raw_samples_per_s": round(samples / raw_s),
        "ratio_raw_over_attribution": round((samples / raw_s) / (samples / path_s), 1),
        "replay_s": round(replay_s, 2), "replay_samples_per_s": round(samples / replay_s),
    }
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    print(f"| {result['hours']} h, {result['gpus']} GPUs | {samples} | {result['attribution_s']} s | "
          f"{result['attribution_samples_per_s']} | {result['raw_s']} s | {result['raw_samples_per_s']} | "
          f"{result['ratio_raw_over_attribution']}x | {result['replay_s']} s | {result['replay_samples_per_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
