"""Fault-suite fixtures: the real broker and engine (tests/stack_support.py), and a table of
every trial's outcome printed at the end of the run."""

from __future__ import annotations

import pytest

from stack_support import broker, stack  # noqa: F401

TRIALS: list[dict] = []


def pytest_terminal_summary(terminalreporter):
    if not TRIALS:
        return
    cols = ["trial", "fault", "at", "outcome", "facts", "lost", "duplicated", "raw_dup_rows", "seconds"]
    rows = [[str(t.get(c, "")) for c in cols] for t in TRIALS]
    widths = [max(len(r[i]) for r in [cols, *rows]) for i in range(len(cols))]
    terminalreporter.section("fault trials")
    for r in [cols, ["-" * w for w in widths], *rows]:
        terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(r, widths)))


@pytest.fixture
def record_trial():
    def record(**row) -> None:
        TRIALS.append(row)
    return record
