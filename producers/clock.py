"""A producer's clock, corrected to the broker's.

Sources stamp ``observed_at`` with the clock of the host they run on. Hosts drift: a node
five minutes ahead would move its samples across pod boundaries. So each producer measures
its offset to one common clock, the Kafka broker's: it sends probes to the clock topic,
which stamps every record with ``LogAppendTime`` (the broker's clock at append), and takes

    offset = broker_append_ms - (local_sent_ms + local_acked_ms) / 2

from the probe with the shortest round trip (error at most half that round trip). The
corrected clock is ``local + offset``; it is measured again every ``resync_s``. The offset
is exported as a metric, and each producer logs it when it changes by more than a second.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Producer

from gpuledger.schemas import Codec

__all__ = ["BrokerClock", "ClockReading", "best_reading", "local_ms"]


def local_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class ClockReading:
    offset_ms: int
    round_trip_ms: int


def best_reading(probes: list[tuple[int, int, int]]) -> ClockReading:
    """From probes ``(local_sent_ms, broker_append_ms, local_acked_ms)``, the offset of the
    one with the shortest round trip."""
    if not probes:
        raise ValueError("no clock probe was acknowledged")
    sent, broker, acked = min(probes, key=lambda p: (p[2] - p[0], p[0]))
    return ClockReading(broker - (sent + acked) // 2, acked - sent)


class BrokerClock:
    """``now_ms()`` = this host's clock corrected by the last measured offset to the broker's."""

    def __init__(self, bootstrap: str, topic: str, host: str, source: str, probes: int = 5,
                 resync_s: float = 60.0, local: Callable[[], int] = local_ms,
                 on_reading: Callable[[ClockReading], None] = lambda r: None,
                 client: Mapping[str, str] | None = None) -> None:
        self.topic, self.host, self.source, self.probes, self.resync_s = topic, host, source, probes, resync_s
        self.local, self.on_reading = local, on_reading
        self._producer = Producer({"bootstrap.servers": bootstrap, **(client or {}), "linger.ms": 0, "acks": "all",
                                   "enable.idempotence": False, "log_level": 3})
        self._codec = Codec("clock_heartbeat")
        self._offset_ms = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reading: ClockReading | None = None

    def measure(self, timeout_s: float = 10.0) -> ClockReading:
        got: list[tuple[int, int, int]] = []
        for _ in range(self.probes):
            sent = self.local()
            box: list = []
            self._producer.produce(self.topic, key=f"{self.host}/{self.source}".encode(),
                                   value=self._codec.encode({"host": self.host, "source": self.source,
                                                             "local_sent_ms": sent, "offset_ms": self._offset_ms}),
                                   on_delivery=lambda err, msg: box.append((err, msg, self.local())))
            self._producer.flush(timeout_s)
            if not box or box[0][0] is not None:
                continue
            _err, msg, acked = box[0]
            kind, broker_ms = msg.timestamp()
            if kind != TIMESTAMP_LOG_APPEND_TIME:
                raise RuntimeError(f"topic {self.topic} does not stamp LogAppendTime: recreate it with "
                                   "message.timestamp.type=LogAppendTime (gpuledger stack up does)")
            got.append((sent, broker_ms, acked))
        reading = best_reading(got)
        with self._lock:
            previous, self._offset_ms, self.reading = self._offset_ms, reading.offset_ms, reading
        if abs(previous - reading.offset_ms) > 1000:
            print(f"clock: {self.host} is {-reading.offset_ms / 1000:+.3f}s from the broker's clock "
                  f"(round trip {reading.round_trip_ms} ms); observed_at is corrected by it", file=sys.stderr, flush=True)
        self.on_reading(reading)
        return reading

    def now_ms(self) -> int:
        with self._lock:
            return self.local() + self._offset_ms

    def start(self) -> BrokerClock:
        """Measure now (raises if the broker cannot be reached), then again every resync_s."""
        self.measure()
        self._thread = threading.Thread(target=self._loop, name="broker-clock", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.resync_s):
            try:
                self.measure()
            except Exception as exc:  # noqa: BLE001 - keep the last offset; say why
                print(f"clock: probe of the broker clock failed ({exc}); keeping the last offset", file=sys.stderr)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self._producer.flush(5)
