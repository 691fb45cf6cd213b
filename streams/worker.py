"""``gpuledger process``: the faust-streaming worker that runs the attribution processor.

One agent reads the reference, watch, PodResources and DCGM topics in batches
(``take_events``); each batch goes through ``Processor.handle`` and ``Processor.flush``
(facts; a checkpoint every ``checkpoint_interval_s`` and when caught up) before faust
acknowledges it. Faust may commit offsets past the last checkpoint; on start the group's
committed offsets are moved back to the checkpoint before the worker joins, so the
batches after it are read again and rewrite the same facts.

The embedded engine (chdb) can be opened by one process only, so this worker also serves
queries for it: ``POST /query`` on 127.0.0.1, announced in ``HOME/process.json``.
``showback`` and other readers use that endpoint while the worker runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import faust
import orjson
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from faust.web import Request, Response, View
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from gpuledger.config import Settings
from gpuledger.producers.dead_letter import DeadLetters
from gpuledger.producers.kafka import KafkaPublisher
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.clickhouse import ClickHouseStore
from gpuledger.sinks.failpoint import OutageStore
from gpuledger.stack.kafka import free_port
from gpuledger.streams.metrics import WorkerMetrics
from gpuledger.streams.processor import Processor
from gpuledger.streams.topics import ensure_topics, read_extents, topics_for

__all__ = ["read_extents", "run_process"]

log = logging.getLogger(__name__)


_COORDINATOR_LOADING = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                        KafkaError.COORDINATOR_NOT_AVAILABLE}


def _align_group_offsets(bootstrap: str, group: str, restored: dict[str, int],
                         extents: dict[str, tuple[int, int]], progress: Callable[[str], None]) -> None:
    """Move committed offsets that are ahead of the checkpoint back to it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    tps = [TopicPartition(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1])) for k in extents]
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                committed = consumer.committed(tps, timeout=10)
                break
            except KafkaException as exc:  # a fresh broker is still electing the group coordinator
                if not exc.args[0].retriable() and exc.args[0].code() not in _COORDINATOR_LOADING:
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    ahead = []
    for tp in committed:
        key = f"{tp.topic}:{tp.partition}"
        want = restored.get(key, extents[key][0])
        if tp.offset >= 0 and tp.offset > want:
            ahead.append(TopicPartition(tp.topic, tp.partition, want))
    if not ahead:
        return
    progress(f"process: group offsets ahead of the checkpoint on {len(ahead)} partitions; moving them back")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:  # a worker killed a moment ago stays a member until its session times out
        members = admin.describe_consumer_groups([group])[group].result().members
        if not members:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"consumer group {group} still has members: is another `process` running?")
        progress(f"process: waiting for the previous worker's session to expire ({len(members)} member(s) left)")
        time.sleep(2)
    while True:
        try:
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, ahead)])[group].result()
            return
        except KafkaException as exc:  # the group still has a member from before a crash
            if time.monotonic() > deadline:
                raise
            progress(f"process: waiting for the previous worker's session to expire ({exc.args[0].str()})")
            time.sleep(2)


def run_process(settings: Settings, until_caught_up: bool, progress: Callable[[str], None],
                wall_ms: Callable[[], int]) -> int:
    topics = topics_for(settings)
    ensure_topics(settings.kafka_bootstrap, topics)
    store = ClickHouseStore(settings.effective_dsn())
    store.ensure_schema()
    if settings.failpoint_store_outage:  # fault injection for the fault suite: writes refused for a while
        store = OutageStore(store, *settings.failpoint_store_outage, time.monotonic)
    publisher = KafkaPublisher(settings.kafka_bootstrap)
    dead = DeadLetters(publisher, topics.dead_letter.name, wall_ms)
    metrics = WorkerMetrics()
    proc = Processor(topics, store, metrics.counting_dead_letters(dead.send), dead.flush,
                     int(settings.stale_ceiling_s * 1000), int(settings.podresources_grace_s * 1000),
                     max_future_skew_ms=int(settings.max_future_skew_s * 1000))
    restored = proc.restore()
    names = [t.name for t in topics.processed()]
    extents = read_extents(settings.kafka_bootstrap, names)
    proc.set_extents(extents)
    highs = {k: high for k, (_, high) in extents.items()}
    group = f"{settings.topic_prefix}-process"
    _align_group_offsets(settings.kafka_bootstrap, group, restored, extents, progress)
    progress(f"process: resuming at checkpoint {proc.seq}" if restored else "process: starting from the beginning")
    source_topics = [t.name for t in topics.processed() if t is not topics.reference]
    metrics.positions(proc.extents, proc.next_offsets, proc.partition_wm, source_topics)
    if settings.worker_metrics_port >= 0:
        progress(f"process: metrics at http://0.0.0.0:{metrics.serve(settings.worker_metrics_port)}/metrics")

    port = settings.query_port or free_port()
    (settings.home / "faust").mkdir(parents=True, exist_ok=True)
    app = faust.App(group, broker=f"kafka://{settings.kafka_bootstrap}", value_serializer="raw",
                    key_serializer="raw", store="memory://", datadir=str(settings.home / "faust" / group),
                    web_enabled=True, web_port=port,
                    web_bind="127.0.0.1", web_host="127.0.0.1", broker_session_timeout=10,
                    broker_heartbeat_interval=1, topic_disable_leader=True, consumer_auto_offset_reset="earliest",
                    broker_commit_interval=1.0)
    channel = app.topic(*names, value_type=bytes, key_type=bytes)
    stats = {"exit": 0, "records": 0, "capacity": 0, "utilization": 0, "requests": 0, "started": time.monotonic(),
             "last_report": 0.0, "checkpointed": 0.0, "extents_read": 0.0}
    worker_box: list[faust.Worker] = []
    stopping = asyncio.Event()

    def report(pending: int, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - stats["last_report"] > 1.0:
            stats["last_report"] = now
            left = sum(max(0, highs[k] - proc.next_offsets.get(k, extents[k][0])) for k in highs)
            progress(f"process: {stats['records']} records, {stats['capacity']} capacity + {stats['utilization']} "
                     f"utilization + {stats['requests']} request facts, {pending} samples waiting, "
                     f"{left if until_caught_up else '-'} records to go")

    async def stop() -> None:
        if not stopping.is_set():
            stopping.set()
            await worker_box[0].stop()

    def halted() -> bool:
        """Stopping: asked to (SIGTERM, SIGINT), caught up, or failed."""
        return stopping.is_set() or bool(worker_box and worker_box[0].should_stop)

    async def pause(seconds: float) -> None:
        """The retry's sleep, cut short when the worker is stopping (SIGTERM stops it within a second)."""
        end = time.monotonic() + seconds
        while not halted() and time.monotonic() < end:
            await asyncio.sleep(min(0.25, max(0.0, end - time.monotonic())))

    def fail(message: str) -> None:
        stats["exit"] = 1
        log.error(message)
        progress(message)
        asyncio.ensure_future(stop())

    def retrying_transient(down_since: list[float]) -> AsyncRetrying:
        def before_sleep(state: RetryCallState) -> None:
            metrics.store_error(transient=True)
            down_since[:] = down_since or [time.monotonic()]
            progress(f"process: ClickHouse unavailable for {time.monotonic() - down_since[0]:.0f}s "
                     f"({state.outcome.exception()}); retrying in {state.next_action.sleep:.1f}s")
        return AsyncRetrying(retry=retry_if_exception(lambda e: isinstance(e, StoreError) and e.transient),
                             wait=wait_exponential(multiplier=0.5, max=5.0), stop=lambda _: halted(), sleep=pause,
                             before_sleep=before_sleep, reraise=True)

    async def apply_flush(final: bool = False) -> bool:
        """Write, then checkpoint. While the store refuses for a while (transient), wait and try
        again with exponential backoff (the batch is not acknowledged meanwhile, and the facts a
        failed write drained are kept). A refusal for good that no row is to blame for stops the
        worker (exit 1) naming the table and the fix; so does a SIGTERM during the retries.
        Returns False once the worker is stopping with the batch unwritten."""
        now = time.monotonic()
        checkpoint = final or now - stats["checkpointed"] >= settings.checkpoint_interval_s
        down_since: list[float] = []
        started = time.monotonic()
        try:
            async for attempt in retrying_transient(down_since):
                with attempt:
                    started = time.monotonic()
                    result = proc.flush(checkpoint)
        except StoreError as exc:
            if exc.transient:
                fail(f"process: stopped while ClickHouse refused writes ({exc}); nothing after the last "
                     "checkpoint was acknowledged, so starting again resumes there and loses nothing")
            else:
                metrics.store_error(transient=False)
                table = f"{store.db}.{exc.table}" if exc.table else "the store"
                fail(f"process: ClickHouse refuses every write to {table}, whatever the rows: {exc}. Fix: make "
                     f"{table} writable again (a dropped table is re-created by starting `gpuledger process`, "
                     "which creates missing tables; check grants and the DSN), then start the worker again: it "
                     "resumes from its last checkpoint and loses nothing")
            return False
        except Exception as exc:  # noqa: BLE001 — a bug, not a record: stop instead of serving a dead worker
            log.exception("process: flush failed")
            fail(f"process: attribution failed while writing a batch ({type(exc).__name__}: {exc}); stopping. "
                 "Nothing after the last checkpoint was acknowledged; report this with the log")
            return False
        if down_since:
            progress(f"process: ClickHouse back after {time.monotonic() - down_since[0]:.0f}s; nothing lost")
        if checkpoint:
            stats["checkpointed"] = now
        stats["capacity"] += result.capacity_facts
        stats["utilization"] += result.utilization_facts
        stats["requests"] += result.request_facts
        metrics.flushed(result.capacity_facts, result.utilization_facts, result.request_facts, result.demand_facts,
                        result.pending_samples, time.monotonic() - started)
        metrics.positions(proc.extents, proc.next_offsets, proc.partition_wm, source_topics)
        report(result.pending_samples)
        return True

    @app.agent(channel)
    async def attribute(stream):
        async for events in stream.take_events(settings.batch_max_records, within=settings.batch_max_wait_s):
            if halted():
                break  # not acknowledged: read again from the checkpoint by the next start
            for ev in events:
                m = ev.message
                proc.handle(m.topic, m.partition, m.offset, m.value)
            stats["records"] += len(events)
            metrics.consumed(ev.message.topic for ev in events)
            metrics.skipped(proc.take_series_skipped())
            if not await apply_flush():  # facts, then checkpoint; faust acks this batch only after we return
                break

    @app.timer(1.0)
    async def housekeeping() -> None:
        if stopping.is_set():
            return
        metrics.positions(proc.extents, proc.next_offsets, proc.partition_wm, source_topics)
        if until_caught_up and proc.caught_up(highs):
            if not await apply_flush(final=True):
                return
            report(0, force=True)
            progress("process: caught up")
            await stop()
            return
        if not until_caught_up and time.monotonic() - stats["extents_read"] >= 5.0:  # new partitions' data
            stats["extents_read"] = time.monotonic()
            proc.set_extents(await asyncio.get_running_loop().run_in_executor(
                None, read_extents, settings.kafka_bootstrap, names))

    @app.page("/query")
    class QueryView(View):
        async def post(self, request: Request) -> Response:
            body = orjson.loads(await request.read())
            try:
                columns, rows = store.query(body["sql"], body.get("parameters"))
            except Exception as exc:  # noqa: BLE001 — reported to the caller
                return self.bytes(orjson.dumps({"error": str(exc)}), content_type="application/json", status=400)
            return self.bytes(orjson.dumps({"columns": columns, "rows": rows}, default=str),
                              content_type="application/json")

    marker = Path(settings.home) / "process.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_bytes(orjson.dumps({"pid": os.getpid(), "query_url": f"http://127.0.0.1:{port}/query",
                                     "dsn": settings.effective_dsn()}))
    worker = faust.Worker(app, loglevel="WARNING", quiet=True, redirect_stdouts=False, stdout=sys.stderr)
    worker.spinner = None
    worker_box.append(worker)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code or 0
    else:
        code = 0
    finally:
        marker.unlink(missing_ok=True)
        store.close()
    if stats["exit"]:
        return int(stats["exit"])
    if until_caught_up and not proc.caught_up(highs):
        progress("process: stopped before catching up")
        return 1
    return int(code)
