"""A worker's per-record path in native code at the least, against the raw loop in the same
run: ``python -m gpuledger.bench.worker_floor --reuse TRUTH`` (the topics a ``bench.fleet
--keep-topics`` run left, TRUTH its truth.json).

The raw loop (bench/fleet.py) consumes and decodes the DCGM topic. This loop consumes what a
worker's units read, the DCGM and the PodResources topics, with the raw loop's consumer, and
hands each consume batch whole to bench/worker_floor.c (built with the C compiler here, ``cc -O2
-shared``), which reads the messages with Python's C API:
each DCGM record's scrape is walked and its 8 devices' utilization and health facts made (ids,
Avro bodies, batch records of 500 facts), each PodResources response compared with its node's
last one. The batch records are produced to a topic of their own (deleted after) by a worker's
producer of facts (bus/acked.py). What it leaves out of a worker: the attribution itself (the
facts carry one piece per device), capacity facts, the health fold, pacing, commits. So its
rate against the raw loop is more than any worker on this machine could reach: an upper bound
for a native per-record path, to set beside the target of half the raw loop.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import orjson
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from gpuledger.bench.fleet import consume_batches, machine, peak_rss_gib, raw_consumer, raw_loop
from gpuledger.bench.proc_monitor import log
from gpuledger.bus.acked import AckedProducer
from gpuledger.bus.offsets import read_extents
from gpuledger.bus.security import client_config
from gpuledger.bus.topics import Topics
from gpuledger.config import load_settings
from gpuledger.stack import KafkaBroker

__all__ = ["Floor", "build", "floor_loop", "main"]

SOURCE = Path(__file__).with_name("worker_floor.c")
FLAGS = ["-DVALUE", "-DHASH_WORDS", "-DDEVICES", "-DFACTS"]
KINDS = ("utilization", "health")  # the kind byte of a batch record in the outbox


def build(tmp: Path) -> ctypes.PyDLL:
    """bench/worker_floor.c built into ``tmp`` and loaded (a library of its own: its state too),
    holding the GIL in its calls (it reads the messages with Python's C API)."""
    cc, out = os.environ.get("CC", "cc"), tmp / "worker_floor.so"
    include = sysconfig.get_paths()["include"]
    built = subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", *FLAGS, "-o", str(out), str(SOURCE),
                            "-lcrypto"], capture_output=True, text=True)
    if built.returncode:
        raise RuntimeError(f"{cc} could not build {SOURCE}: {built.stderr.strip()} (set CC to a C compiler; "
                           "OpenSSL's and Python's headers are needed, as for the engine's build)")
    lib = ctypes.PyDLL(str(out))
    lib.wf_init.argtypes, lib.wf_init.restype = [ctypes.c_char_p], ctypes.c_int
    lib.wf_messages.argtypes = [ctypes.py_object, ctypes.py_object, ctypes.POINTER(ctypes.c_long)]
    lib.wf_messages.restype = ctypes.c_long
    lib.wf_outbox.argtypes, lib.wf_outbox.restype = [ctypes.POINTER(ctypes.c_void_p)], ctypes.c_size_t
    lib.wf_outbox_clear.argtypes = lib.wf_flush.argtypes = []
    lib.wf_outbox_clear.restype = lib.wf_flush.restype = None
    return lib


class Floor:
    """The library, fed consume batches; its batch records taken as they are sent."""

    def __init__(self, lib: ctypes.PyDLL, dcgm_topic: str) -> None:
        if lib.wf_init(dcgm_topic.encode()) < 0:
            raise RuntimeError("worker floor: OpenSSL has no SHA-256")
        self.lib, self.dcgm_topic, self.changed = lib, dcgm_topic, ctypes.c_long(0)

    def messages(self, msgs: list) -> int:
        """The device samples of a consume batch's DCGM records (the others: PodResources). A
        message that cannot be read raises what reading it raised (ctypes.PyDLL passes it on)."""
        got = self.lib.wf_messages(msgs, self.dcgm_topic, ctypes.byref(self.changed))
        if got < 0:
            raise ValueError(f"worker floor: record {-1 - got} of the batch is neither a DCGM scrape nor a "
                             "PodResources snapshot (v1): the topics are not a generated fleet's")
        return got

    def take(self, flush: bool = False) -> list[tuple[str, bytes]]:
        """(kind, batch record) of the records sent since the last take (``flush``: those still
        open too)."""
        if flush:
            self.lib.wf_flush()
        at = ctypes.c_void_p()
        n = self.lib.wf_outbox(ctypes.byref(at))
        out, i = [], 0
        while i < n:  # each record copied out once, as a worker's bytes of it
            head = ctypes.string_at(at.value + i, 5)
            size = int.from_bytes(head[:4], "little")
            out.append((KINDS[head[4]], ctypes.string_at(at.value + i + 5, size)))
            i += 5 + size
        self.lib.wf_outbox_clear()
        return out


def floor_loop(bootstrap: str, topics: Topics, client: dict | None = None, produce: bool = True) -> dict:
    """Consume the DCGM and PodResources topics to their ends through the floor; produce its
    batch records to ``<prefix>.floor-facts`` (made and deleted here) unless ``produce`` is False."""
    dcgm, pr = topics.dcgm.name, topics.podresources.name
    extents = read_extents(bootstrap, [dcgm, pr], client=client)
    expected = sum(high - low for low, high in extents.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {}), "log_level": 3})
    facts_topic = f"{topics.prefix}.floor-facts"
    producer = None
    if produce:
        for fut in admin.create_topics([NewTopic(facts_topic, topics.podresources.partitions, 1,
                                                 config={"compression.type": "lz4"})]).values():
            fut.result()
        producer = AckedProducer(bootstrap, client)  # the worker's producer of facts
    consumer = raw_consumer(bootstrap, client, extents, "floor")
    out = {"records": 0, "device_samples": 0, "batch_records": 0, "fact_bytes": 0}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            floor, seen, clock = Floor(build(Path(tmp)), dcgm), 0, {}
            for msgs in consume_batches(consumer, expected, "worker floor", clock):  # timed as the raw loop
                error = next((m.error() for m in msgs if m.error()), None)
                if error is not None:
                    raise KafkaException(error)
                out["device_samples"] += floor.messages(msgs)
                seen += len(msgs)
                _produce(producer, facts_topic, floor.take(), out)
            _produce(producer, facts_topic, floor.take(flush=True), out)
            if producer is not None:
                producer.flush()  # raises unless every batch record was acknowledged
            wall, cpu, main = (time.perf_counter() - clock["wall"], time.process_time() - clock["cpu"],
                               time.thread_time() - clock["main"])
            out.update(records=seen, seconds=round(wall, 2), samples_per_s=round(out["device_samples"] / wall),
                       cpu_pct=round(100 * cpu / wall), main_thread_cpu_s=round(main, 2),
                       snapshots_changed=floor.changed.value, process_peak_rss_gib=peak_rss_gib())
    finally:
        consumer.close()
        if produce:
            for fut in admin.delete_topics([facts_topic]).values():
                fut.result()
    return out


def _produce(producer: AckedProducer | None, topic: str, records: list[tuple[str, bytes]], out: dict) -> None:
    for _kind, value in records:
        out["batch_records"] += 1
        out["fact_bytes"] += len(value)
        if producer is not None:
            producer.produce(topic, None, value)  # (waits for room when its queue is full)
    if producer is not None:
        producer.poll()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpuledger.bench.worker_floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--reuse", metavar="TRUTH_JSON", required=True,
                   help="the truth.json of a `bench.fleet --keep-topics` run: its topics are read")
    p.add_argument("--bootstrap", help="Kafka bootstrap (default: GPULEDGER_KAFKA_BOOTSTRAP)")
    p.add_argument("--no-produce", action="store_true", help="make the batch records without producing them")
    args = p.parse_args(argv)
    truth = orjson.loads(Path(args.reuse).read_bytes())
    s = load_settings(kafka_bootstrap=args.bootstrap, source_partitions=truth["partitions"],
                      topic_prefix=truth["topic_prefix"])
    topics = Topics(truth["topic_prefix"], s.source_partitions, s.audit_retention_days)
    client = client_config(s)
    log(f"worker floor: machine {machine()}")
    KafkaBroker(s.home, s.kafka_bootstrap, s.kafka_libs, s.kafka_heap_opts, client=client).up(progress=log)
    log("worker floor: raw loop (consume + Avro decode of the DCGM topic)")
    raw = raw_loop(s.kafka_bootstrap, topics.dcgm.name, client)
    log(f"worker floor: raw loop {raw}")
    log("worker floor: the DCGM and PodResources topics through the native floor")
    floor = floor_loop(s.kafka_bootstrap, topics, client, produce=not args.no_produce)
    log(f"worker floor: {floor}")
    samples = truth["device_samples"]
    print(f"Machine: {machine()}\n\n| {truth['gpus']} GPUs x {truth['hours']:g} h ({samples} samples) | wall s "
          "| samples/s | against the raw loop | CPU | check |\n|---|---|---|---|---|---|")
    print(f"| raw loop (consume + Avro decode, DCGM) | {raw['seconds']} | {raw['samples_per_s']} | 1.0x "
          f"| {raw['cpu_pct']} % | {raw['device_samples']} samples |")
    print(f"| native floor (DCGM and PodResources, {floor['records']} records) | {floor['seconds']} "
          f"| {floor['samples_per_s']} | {floor['samples_per_s'] / raw['samples_per_s']:.3f}x | {floor['cpu_pct']} % "
          f"| {floor['device_samples']} samples, {floor['batch_records']} batch records "
          f"({floor['fact_bytes'] / 1e9:.2f} GB){'' if args.no_produce else ' produced'} |")
    return 0 if floor["device_samples"] == raw["device_samples"] == samples else 1


if __name__ == "__main__":
    sys.exit(main())
