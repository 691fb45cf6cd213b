"""CPU per device sample on the attribution path, in one process and without a broker:
``python -m gpuledger.bench.hotpath --gpus 64 --hours 1``.

A generated fleet (bench/fleet_gen.py) is published into memory, in the order the fleet
benchmark publishes it to Kafka, and fed to the engine (streams/engine.py) as a worker feeds
it: every record handled, facts taken every ``--advance-every`` records and encoded as a
worker encodes them for the fact topics (streams/fact_codec.py). Each stage's CPU time is
reported per device sample, beside a plain Avro decode of the same DCGM records (what the
fleet benchmark's raw loop does after fetching), and per DCGM record: each source topic's
handling, the facts made and encoded (``--stages``: a DCGM record's parse, health facts and
decode apart too), to set beside what the raw loop leaves a record. What the broker, producing and the sink
cost is left out: this is the worker's own Python, the part a change to the hot path moves.
The cycle collector is set as a worker sets it (streams/collector.py).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import zlib

from gpuledger.bench.fleet_gen import fleet_plan, publish_fleet
from gpuledger.bus.topics import Topics
from gpuledger.domain import attribution
from gpuledger.domain.capacity import python_segment_facts
from gpuledger.domain.gpu_incidents import HealthFold
from gpuledger.schemas import Codec
from gpuledger.streams.collector import collect_for_the_data_path
from gpuledger.streams.engine import Engine
from gpuledger.streams.fact_batches import emit_batched, encode_fact_bodies

__all__ = ["MemoryPublisher", "engine_over", "main", "run"]

PARTITIONS = 4


class MemoryPublisher:
    """The publisher ``publish_fleet`` writes to, holding records in publish order with the
    partition Kafka's keyed partitioning would pick for one key on every topic (the same key,
    the same number: co-partitioned, as the engine requires)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, bytes]] = []

    def partitions(self, topic: str) -> int:
        return PARTITIONS

    def publish(self, topic: str, key: bytes, value: bytes, timestamp_ms: int, partition: int | None = None) -> None:
        self.records.append((topic, zlib.crc32(key) % PARTITIONS if partition is None else partition, value))

    def flush(self) -> None:
        pass


def engine_over(pub: MemoryPublisher, topics: Topics, dead_letter) -> tuple[Engine, list[tuple[str, int, int, bytes]]]:
    """An engine whose sources are ``pub``'s records, and those records as (topic, partition,
    offset, value) in publish order: every partition of every source topic has its extent
    (empty where nothing was published), so the engine's watermarks see each one end."""
    engine = Engine(topics, dead_letter, stale_ceiling_ms=300_000, node_grace_ms=120_000)
    offsets: dict[tuple[str, int], int] = {}
    placed = []
    for topic, partition, value in pub.records:
        n = offsets.get((topic, partition), 0)
        offsets[topic, partition] = n + 1
        placed.append((topic, partition, n, value))
    engine.extents = {f"{t}:{p}": (0, n) for (t, p), n in offsets.items()}
    for t in (topics.dcgm, topics.podresources, topics.vgpu, topics.requests, topics.model_metrics, topics.k8s,
              topics.reference):
        for p in range(PARTITIONS):
            engine.extents.setdefault(f"{t.name}:{p}", (0, 0))
    return engine, placed


def _dropped(*_args, **_kwargs) -> None:
    """A producer's produce that keeps nothing (and the wait for room it never needs)."""


def run(gpus: int, hours: float, cadence_s: float, advance_every: int, progress=print,
        python_capacity: bool = False, stages: bool = False) -> dict:
    """The run, with the collector set as in a worker and set back after it. ``python_capacity``:
    capacity segments made by the Python reference (``python_segment_facts``) instead of in C,
    for a comparison of the two on the same machine. ``stages``: a DCGM record's parse, health
    facts and decode timed apart as well (each call wrapped: a little slower in all)."""
    before, segments = gc.get_threshold(), attribution.segment_facts
    parse, health = attribution.parse_exposition, HealthFold.scrape
    collect_for_the_data_path()
    if python_capacity:
        attribution.segment_facts = python_segment_facts
    try:
        return _run(gpus, hours, cadence_s, advance_every, progress, stages)
    finally:
        gc.set_threshold(*before)
        attribution.segment_facts = segments
        attribution.parse_exposition, HealthFold.scrape = parse, health


def _timed(into: dict, name: str, f):
    """``f``, its CPU time added to ``into[name]``."""
    def timed(*args, **kwargs):
        c0 = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            into[name] = into.get(name, 0.0) + time.process_time() - c0
    return timed


def _run(gpus: int, hours: float, cadence_s: float, advance_every: int, progress, stages: bool) -> dict:
    plan = fleet_plan(gpus, hours, cadence_s, cadence_s)
    topics = Topics("hotpath", PARTITIONS, 30)
    pub = MemoryPublisher()
    counts = publish_fleet(plan, pub, topics, lambda _m: None)
    progress(f"hotpath: {len(pub.records)} records, {counts['device_samples']} device samples")
    dead: list[tuple[str, str]] = []
    engine, placed = engine_over(pub, topics, lambda src, reason, _raw: dead.append((src, reason)))
    engine.encoded = encode_fact_bodies()  # as a worker makes them

    dcgm = Codec(topics.dcgm.schema)
    values = [v for t, _, _, v in placed if t == topics.dcgm.name]
    c0 = time.process_time()
    for v in values:
        dcgm.decode(v)
    decode_s = time.process_time() - c0

    split: dict[str, float] = {}  # a DCGM record's stages, with ``stages``
    if stages:
        attribution.parse_exposition = _timed(split, "parse", attribution.parse_exposition)
        HealthFold.scrape = _timed(split, "health", HealthFold.scrape)
        codec = engine.codecs[topics.dcgm.name]
        codec.decode = _timed(split, "decode", codec.decode)
    handle_s = advance_s = encode_s = 0.0
    by_topic: dict[str, float] = {}
    facts = 0
    unit_topics, bcast_topics = set(engine.unit_topics), set(engine.broadcast_topics)
    fact_topics = {kind: spec.name for kind, spec in topics.facts.items()}
    for i, (topic, partition, offset, value) in enumerate(placed, 1):
        c0 = time.process_time()
        if topic in unit_topics:
            engine.handle_unit(topic, partition, offset, value)
        if topic in bcast_topics:
            engine.handle_broadcast(topic, partition, offset, value, dead_letter=topic not in unit_topics)
        c1 = time.process_time()
        handle_s += c1 - c0
        by_topic[topic] = by_topic.get(topic, 0.0) + c1 - c0
        if i % advance_every == 0 or i == len(placed):
            batch = engine.advance(closing=i == len(placed))
            c2 = time.process_time()
            facts += emit_batched(batch, fact_topics, _dropped, _dropped)  # as a worker, to a producer that drops
            advance_s += c2 - c1
            encode_s += time.process_time() - c2
    samples = counts["device_samples"]
    us = 1e6 / samples
    per_record = 1e6 / max(1, len(values))  # a DCGM record's share of each
    short = {t.name: key for key, t in (("dcgm", topics.dcgm), ("podresources", topics.podresources),
                                         ("k8s", topics.k8s), ("reference", topics.reference), ("vgpu", topics.vgpu),
                                         ("requests", topics.requests), ("model_metrics", topics.model_metrics))}
    out = {"gpus": gpus, "hours": hours, "device_samples": samples, "records": len(placed), "facts": facts,
           "dead_lettered": len(dead), "us_per_sample": {
               "avro_decode_dcgm": round(decode_s * us, 2), "handle": round(handle_s * us, 2),
               "advance": round(advance_s * us, 2), "encode": round(encode_s * us, 2),
               "worker_total": round((handle_s + advance_s + encode_s) * us, 2)},
           "us_per_dcgm_record": {
               **{f"handle_{short[t]}": round(v * per_record, 2) for t, v in sorted(by_topic.items())},
               **{f"dcgm_{k}": round(v * per_record, 2) for k, v in split.items()},
               "advance": round(advance_s * per_record, 2), "encode": round(encode_s * per_record, 2)}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuledger.bench.hotpath", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=64, help="GPUs (a multiple of 8)")
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--cadence-s", type=float, default=10.0, help="DCGM and PodResources interval")
    p.add_argument("--advance-every", type=int, default=500, help="records between two takes of the facts")
    p.add_argument("--python-capacity", action="store_true",
                   help="capacity segments by the Python reference, not in C (to compare the two)")
    p.add_argument("--stages", action="store_true",
                   help="a DCGM record's parse, health facts and decode timed apart (each call wrapped)")
    args = p.parse_args(argv)
    result = run(args.gpus, args.hours, args.cadence_s, args.advance_every, progress=lambda m: print(m, file=sys.stderr),
                 python_capacity=args.python_capacity, stages=args.stages)
    print(result)
    return 1 if result["dead_lettered"] or not result["facts"] else 0


if __name__ == "__main__":
    sys.exit(main())
