"""What every ``gpuledger`` command shares: usage errors, progress on stderr, wall time."""

from __future__ import annotations

import sys
import time

__all__ = ["UsageError", "progress", "wall_ms"]


class UsageError(ValueError):
    """Bad input from the user: exit 2 with the reason."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wall_ms() -> int:
    return int(time.time() * 1000)
