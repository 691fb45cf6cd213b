"""Fixtures for tests on the real Kafka broker (started once per session, or reused) and
the real ClickHouse engine (chdb on disk, one directory per test). Each test gets its own
topic prefix, so tests share the broker without sharing data."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from gpuledger.bus.offsets import read_extents
from gpuledger.schemas import Codec
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.stack import KafkaBroker
from gpuledger.stack.kafka import free_port

REPO = Path(__file__).resolve().parents[1]
TEST_BROKER_HOME = REPO / ".gpuledger" / "test-broker"
LIBS = Path(os.environ.get("GPULEDGER_KAFKA_LIBS", REPO / ".cache/kafka-3.9.2/libs"))
GPULEDGER = [sys.executable, "-m", "gpuledger.cli.main"]


def chosen_bootstrap() -> str:
    """The test broker's address: GPULEDGER_TEST_BOOTSTRAP when set (a broker to share), else
    that of the broker this checkout's tests started while it runs, else a free port. A broker
    another checkout (or its test run) keeps on this machine is never used by chance: when it
    stops, this run's tests would lose their broker."""
    return (os.environ.get("GPULEDGER_TEST_BOOTSTRAP") or KafkaBroker.started_address(TEST_BROKER_HOME)
            or f"127.0.0.1:{free_port()}")


BOOTSTRAP = chosen_bootstrap()


@pytest.fixture(scope="session")
def broker():
    b = KafkaBroker(TEST_BROKER_HOME, BOOTSTRAP, LIBS)
    started = not b.reachable(1.0)
    if started:
        b.down()  # this checkout's broker when it runs but does not answer: its address was not taken
        shutil.rmtree(b.dir, ignore_errors=True)  # each session starts from an empty broker, as CI does
        b.up(progress=lambda m: print(m, file=sys.stderr))
    b.owned = started or b.status().pid is not None  # the fault suite may stop and start it
    yield b
    if started:
        b.down()


@dataclass
class Stack:
    """One isolated gpuledger deployment on the shared broker."""

    home: Path
    prefix: str
    extra_env: dict = field(default_factory=dict)

    @property
    def dsn(self) -> str:
        return f"chdb://{self.home / 'clickhouse'}"

    def env(self) -> dict:
        return {**os.environ, "GPULEDGER_HOME": str(self.home), "GPULEDGER_KAFKA_BOOTSTRAP": BOOTSTRAP,
                "GPULEDGER_TOPIC_PREFIX": self.prefix, "GPULEDGER_KAFKA_LIBS": str(LIBS),
                "GPULEDGER_CLICKHOUSE_DSN": self.dsn, "GPULEDGER_BATCH_MAX_RECORDS": "500", **self.extra_env}

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        proc = self.start(*args)  # a session of its own: its workers are in its process group
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # every process of it prints its threads' stacks, then goes
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(proc.pid, signal.SIGUSR1)
            time.sleep(3)
            stop(proc, signal.SIGKILL)
            _, err = proc.communicate()
            raise AssertionError(f"gpuledger {' '.join(args)} still running after {timeout:.0f} s; what it "
                                 f"printed last, stacks included:\n{err[-12000:]}") from None
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check and done.returncode != 0:
            raise AssertionError(f"gpuledger {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
        return done

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*GPULEDGER, *args], env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def showback_of(self, capture: Path, from_iso: str, to_iso: str) -> dict:
        """Ingest a capture, process it until caught up, and read the showback document."""
        self.run("ingest", str(capture))
        self.run("process", "--until-caught-up")
        return orjson.loads(self.run("showback", "--from", from_iso, "--to", to_iso, "--format", "json").stdout)

    def facts(self, with_source: bool = True) -> dict[str, list[tuple]]:
        """Every fact row (all columns, deduplicated), sorted: the fact set to compare.
        Without the source position columns when evidence reached Kafka in another order."""
        store = ClickHouseStore(self.dsn)
        try:
            out = {}
            for table in ("capacity_facts", "utilization_facts"):
                # topic names carry each stack's prefix: compare them without it
                cols = (f"* REPLACE (replaceOne(src_topic, '{self.prefix}.', '') AS src_topic)" if with_source
                        else "* EXCEPT (src_topic, src_partition, src_offset)")
                _, rows = store.query(f"SELECT {cols} FROM gpuledger.{table} FINAL ORDER BY fact_id")
                ids = [r[0] for r in rows]  # FINAL folds a fact id only within a partition: readers could see one twice
                assert len(ids) == len(set(ids)), f"{table}: {len(ids) - len(set(ids))} fact ids readers see twice"
                out[table] = rows
            return out
        finally:
            store.close()

    def committed_share(self, source: str = "dcgm") -> float:
        """Share of a source topic's records the `process` group has committed: the workers'
        own progress (the sink's lags it on a busy machine)."""
        topic = f"{self.prefix}.source.{source}"
        extents = read_extents(BOOTSTRAP, [topic])
        c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"{self.prefix}-process", "log_level": 3})
        try:
            tps = [TopicPartition(topic, int(k.rsplit(":", 1)[1])) for k in extents]
            done = sum(max(0, tp.offset) for tp in c.committed(tps, timeout=10))
        finally:
            c.close()
        return done / max(1, sum(high - low for low, high in extents.values()))

    def raw_duplicate_rows(self) -> int:
        """Rows stored beyond one per fact id, counted before FINAL (and before background
        merges fold them): what at-least-once delivery wrote twice. Readers see none of them —
        every query reads FINAL — so this is reported, not an error."""
        store = ClickHouseStore(self.dsn)
        try:
            total = 0
            for table in ("capacity_facts", "utilization_facts", "request_facts"):
                _, dup = store.query(f"SELECT count() - uniqExact(fact_id) FROM gpuledger.{table}")
                total += int(dup[0][0])
            return total
        finally:
            store.close()


@pytest.fixture
def stack(broker, tmp_path) -> Stack:
    return Stack(tmp_path / "home", f"t{uuid.uuid4().hex[:10]}")


def undisturbed_facts(root: Path, capture: Path) -> dict[str, list[tuple]]:
    """The fact set of one undisturbed `process --until-caught-up` over ``capture``, in a
    stack (home and topic prefix) of its own under ``root``: what a disturbed run must equal."""
    stack = Stack(root, f"t{uuid.uuid4().hex[:10]}")
    stack.run("ingest", str(capture))
    stack.run("process", "--until-caught-up")
    return stack.facts()


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def dead_letters(topic: str) -> list[dict]:
    """Every record of a dead-letter topic (partition 0), decoded."""
    codec, out = Codec("dead_letter"), []
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": f"{topic}-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, low)])
    while len(out) < high - low:
        msg = consumer.poll(5.0)
        assert msg is not None, f"dead-letter topic {topic}: read {len(out)} of {high - low}"
        if not msg.error():
            out.append(codec.decode(msg.value()))
    consumer.close()
    return out
