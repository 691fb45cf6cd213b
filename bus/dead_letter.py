"""Dead letters from the processing stage: a record that cannot be decoded or applied goes
to the dead-letter topic with its source position and the reason; processing goes on."""

from __future__ import annotations

from collections.abc import Callable

from gpuledger.bus.port import Publisher
from gpuledger.schemas import Codec

__all__ = ["DeadLetters"]

_RAW_LIMIT = 64 * 1024


class DeadLetters:
    def __init__(self, publisher: Publisher, topic: str, wall_ms: Callable[[], int]) -> None:
        self.publisher, self.topic, self.wall_ms = publisher, topic, wall_ms
        self.codec = Codec("dead_letter")
        self.sent = 0

    def send(self, source: str, reason: str, raw: bytes) -> None:
        now = self.wall_ms()
        self.publisher.publish(self.topic, source.encode(), self.codec.encode({
            "ingested_at_ms": now, "stage": "process", "source": source, "reason": reason, "raw": raw[:_RAW_LIMIT],
        }), now)
        self.sent += 1

    def flush(self) -> None:
        self.publisher.flush()
