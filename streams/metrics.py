"""Prometheus metrics of the ``gpuledger process`` worker, on a registry of its own.

The worker updates them where it applies batches (streams/worker.py); the processor itself
stays free of them. Positions (consumer lag, source event time) are set from the
processor's offsets and watermarks on the worker's event loop after every batch and every
housekeeping tick, so the HTTP thread only reads gauges.

- ``gpuledger_worker_records_total{topic}``: records consumed (including ones skipped as
  already processed below the checkpoint).
- ``gpuledger_worker_facts_written_total{table}``: fact rows written (a batch replayed after
  a crash writes its rows again; the store deduplicates them).
- ``gpuledger_worker_dead_letters_total{stage, reason}``: records sent to the dead-letter
  topic; ``reason`` is the class of the failure (the exception name, ``EventTimeError`` for an
  event time out of bounds, ``StoreRejected`` for a fact row ClickHouse refused for good),
  never its text. Stage ``process`` counts every record the worker refused and went past.
- ``gpuledger_worker_consumer_lag_records{topic, partition}``: end offset minus the next
  offset the processor will read.
- ``gpuledger_source_last_event_timestamp_seconds{topic}``: newest event time read from a
  source topic (unix seconds).
- ``gpuledger_worker_flush_seconds``: one write (facts, dead letters, checkpoint) of a batch.
- ``gpuledger_worker_store_errors_total{kind}``: writes the store refused; ``kind`` is
  ``transient`` (retried with backoff until it takes them) or ``permanent`` (the batch's
  refused rows dead-lettered, or the worker stopped when the table itself is unusable).
- ``gpuledger_worker_dcgm_series_skipped_total{reason}``: DCGM series not taken as samples:
  blank sentinels, implausible values (framebuffer, power, energy), series repeated per pod.
- ``gpuledger_worker_pending_samples``, ``gpuledger_worker_last_flush_timestamp_seconds``.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable

from gpuledger.config.metrics_http import serve_metrics
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["WorkerMetrics"]

_FLUSH_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_TABLES = ("capacity_facts", "utilization_facts", "request_facts", "demand_facts")


def reason_class(reason: str) -> str:
    """The class of a dead-letter reason: ``"CodecError: bad magic"`` -> ``"CodecError"``."""
    head = reason.split(":", 1)[0].strip()
    return head if head.isidentifier() else "other"


class WorkerMetrics:
    """The worker's metric families on ``registry`` (a new one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.records = Counter("gpuledger_worker_records_total", "Records consumed from Kafka, by topic.", ["topic"],
                               registry=r)
        self.facts = Counter("gpuledger_worker_facts_written_total", "Fact rows written to ClickHouse, by table.",
                             ["table"], registry=r)
        self.dead_letters = Counter("gpuledger_worker_dead_letters_total",
                                    "Records sent to the dead-letter topic, by stage and failure class.",
                                    ["stage", "reason"], registry=r)
        self.lag = Gauge("gpuledger_worker_consumer_lag_records",
                         "End offset of a partition minus the next offset the processor will read.",
                         ["topic", "partition"], registry=r)
        self.last_event = Gauge("gpuledger_source_last_event_timestamp_seconds",
                                "Newest event time (observed_at) read from a source topic, unix seconds.",
                                ["topic"], registry=r)
        self.flush_seconds = Histogram("gpuledger_worker_flush_seconds",
                                       "Duration of one batch write (facts, dead letters, checkpoint when due).",
                                       buckets=_FLUSH_BUCKETS_S, registry=r)
        self.store_errors = Counter("gpuledger_worker_store_errors_total",
                                    "Batch writes ClickHouse refused, by kind: transient (retried, the batch not "
                                    "acknowledged meanwhile) or permanent (rows isolated, or the worker stops).",
                                    ["kind"], registry=r)
        self.series_skipped = Counter("gpuledger_worker_dcgm_series_skipped_total",
                                      "DCGM series not taken as samples, by reason (blank, implausible, repeated).",
                                      ["reason"], registry=r)
        self.pending_samples = Gauge("gpuledger_worker_pending_samples",
                                     "DCGM samples waiting for the PodResources snapshot that explains them.",
                                     registry=r)
        self.snapshot_bytes = Gauge("gpuledger_worker_state_snapshot_bytes",
                                    "Size of the latest state snapshot written to the changelog, by part "
                                    "(unit-N or broadcast); bounded by what is live.", ["part"], registry=r)
        self.last_flush = Gauge("gpuledger_worker_last_flush_timestamp_seconds",
                                "When a batch was last written, unix seconds.", registry=r)
        for table in _TABLES:
            self.facts.labels(table)
        for kind in ("transient", "permanent"):
            self.store_errors.labels(kind)

    def consumed(self, topics: Iterable[str]) -> None:
        """One batch's records, named by their topics."""
        for topic, n in Tally(topics).items():
            self.records.labels(topic).inc(n)

    def consumed_counts(self, per_topic: dict[str, int]) -> None:
        for topic, n in per_topic.items():
            self.records.labels(topic).inc(n)

    def flushed(self, capacity: int, utilization: int, requests: int, demand: int, pending_samples: int | None,
                seconds: float) -> None:
        """A batch was written: its fact counts and how long the write took (``pending_samples``:
        None leaves the gauge as it stands, for a caller that counts them less often)."""
        for table, n in zip(_TABLES, (capacity, utilization, requests, demand)):
            if n:
                self.facts.labels(table).inc(n)
        if pending_samples is not None:
            self.pending_samples.set(pending_samples)
        self.flush_seconds.observe(seconds)
        self.last_flush.set(time.time())

    def snapshots(self, sizes: dict[str, int]) -> None:
        for part, n in sizes.items():
            self.snapshot_bytes.labels(part).set(n)

    def skipped(self, series_skipped: dict[str, int]) -> None:
        for reason, n in series_skipped.items():
            self.series_skipped.labels(reason).inc(n)

    def store_error(self, transient: bool = True) -> None:
        self.store_errors.labels("transient" if transient else "permanent").inc()

    def counting_dead_letters(self, send: Callable[[str, str, bytes], None],
                              stage: str = "process") -> Callable[[str, str, bytes], None]:
        """Wrap a dead-letter sender ``(source, reason, raw)`` so every record it takes is counted."""
        def counted(source: str, reason: str, raw: bytes) -> None:
            send(source, reason, raw)
            self.dead_letters.labels(stage, reason_class(reason)).inc()
        return counted

    def positions(self, extents: dict[str, tuple[int, int]], next_offsets: dict[str, int],
                  partition_wm_ms: dict[str, int], source_topics: Iterable[str]) -> None:
        """Set lag per partition (``"topic:partition"`` keys) and the newest event time per source topic."""
        for key, (low, high) in extents.items():
            topic, partition = key.rsplit(":", 1)
            self.lag.labels(topic, partition).set(max(0, high - max(low, next_offsets.get(key, low))))
        newest: dict[str, int] = {}
        for key, ts_ms in partition_wm_ms.items():
            topic = key.rsplit(":", 1)[0]
            newest[topic] = max(newest.get(topic, ts_ms), ts_ms)
        for topic in source_topics:
            if topic in newest:
                self.last_event.labels(topic).set(newest[topic] / 1000)

    def serve(self, port: int, addr: str = "127.0.0.1", token: str | None = None) -> int:
        """Serve /metrics on ``port`` (0 = any free port); returns the port."""
        return serve_metrics(self.registry, port, addr, token).server_address[1]
