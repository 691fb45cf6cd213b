"""What every ``gpuledger`` command shares: usage errors, progress on stderr, wall time."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import orjson

__all__ = ["UsageError", "emit", "progress", "wall_ms"]


class UsageError(ValueError):
    """Bad input from the user: exit 2 with the reason."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wall_ms() -> int:
    return int(time.time() * 1000)


def emit(fmt: str, document: object, csv: Callable[[], str], table: Callable[[], str]) -> None:
    """A command's result on stdout: ``json`` (the document, indented), ``csv`` or a table."""
    if fmt == "json":
        print(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
    elif fmt == "csv":
        sys.stdout.write(csv())
    else:
        print(table())
