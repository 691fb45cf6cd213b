"""What every ``gpuledger`` command shares: usage errors, progress on stderr, wall time."""

from __future__ import annotations

import faulthandler
import signal
import sys
import time
from collections.abc import Callable

import orjson

__all__ = ["UsageError", "emit", "progress", "stacks_on_sigusr1", "wall_ms"]


class UsageError(ValueError):
    """Bad input from the user: exit 2 with the reason."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` prints every thread's Python stack to stderr and the command goes on:
    what a worker or sink that seems stuck is waiting in. Left alone where the signal already
    has a handler (the command runs inside another program)."""
    if not hasattr(signal, "SIGUSR1") or signal.getsignal(signal.SIGUSR1) != signal.SIG_DFL:
        return
    try:
        sys.stderr.fileno()  # a captured stderr (a test's) has no descriptor to write the stacks to
    except (AttributeError, OSError, ValueError):
        return
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


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
