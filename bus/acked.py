"""The worker's producer for what must be durable before offsets are committed: facts,
progress records and state snapshots. Idempotent, ``acks=all``, a bounded queue (when the
broker falls behind, producing waits), and a flush that fails loudly unless every record was
acknowledged (step 1 and 2 of the commit protocol in streams/runtime.py)."""

from __future__ import annotations

from confluent_kafka import KafkaException, Producer

from gpuledger.bus.topics import STATE_MAX_BYTES

__all__ = ["AckedProducer"]

FLUSH_S = 120


class AckedProducer:
    def __init__(self, bootstrap: str, client: dict | None = None) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, **(client or {}), "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
                                  "message.max.bytes": STATE_MAX_BYTES + 1_000_000, "log_level": 3,
                                  # ~10 k facts (a few MB) in flight keep the broker busy; a deeper queue is only
                                  # memory that follows how far the broker falls behind
                                  "queue.buffering.max.messages": 10_000,
                                  "queue.buffering.max.kbytes": 2 * STATE_MAX_BYTES // 1024,
                                  # only failures come back to Python: no callback per acknowledged record
                                  "on_delivery": self._delivered, "delivery.report.only.error": True})
        self.errors: list[str] = []

    def produce(self, topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key)
                return
            except BufferError:  # the queue is full: wait for the broker to take some
                self.room()

    def room(self) -> None:
        """Wait a little for the broker to take some of a full queue (what to do when
        ``producer.produce`` raises BufferError)."""
        self.producer.poll(0.05)

    def poll(self) -> None:
        self.producer.poll(0)

    def flush(self) -> None:
        """Return once everything produced is acknowledged; raise if anything was not."""
        left = self.producer.flush(FLUSH_S)
        if left or self.errors:
            raise KafkaException(f"{left} records undelivered after {FLUSH_S} s; first error: "
                                 f"{self.errors[:1] or 'none'}: is the broker up?")

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}: {err}")
