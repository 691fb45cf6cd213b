"""Processes of a benchmark run, measured: wall time, CPU time and peak RSS of every process of
its session (``/proc`` polled every 0.5 s, VmHWM per pid), and the local broker's CPU time over
the same span."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["BROKER_PID", "TreeMonitor", "cpu_ticks", "log", "timed_process"]

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class TreeMonitor(threading.Thread):
    """Polls /proc every 0.5 s for the processes of one session (the started process and
    everything it forks): peak RSS (VmHWM) and CPU ticks per pid."""

    def __init__(self, sid: int, log_path: Path) -> None:
        super().__init__(daemon=True)
        self.sid, self.log_path, self.done = sid, log_path, threading.Event()
        self.hwm_kb: dict[int, int] = {}
        self.ticks: dict[int, int] = {}
        self.names: dict[int, str] = {}

    def poll(self) -> set[int]:
        """Read every process of the session now; returns their pids."""
        alive = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                if int(fields[3]) != self.sid:  # field 6: session id
                    continue
                pid = int(entry.name)
                alive.add(pid)
                self.names[pid] = stat[stat.index("(") + 1:stat.rindex(")")]
                self.ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.hwm_kb[pid] = max(self.hwm_kb.get(pid, 0), int(line.split()[1]))
            except (OSError, ValueError, IndexError):  # gone meanwhile
                continue
        return alive

    def peak_rss_gib(self) -> dict[str, float]:
        """Each process's polled peak RSS, by ``name[pid]``."""
        return {f"{self.names.get(p, '?')}[{p}]": round(kb / 2**20, 2) for p, kb in sorted(self.hwm_kb.items())}

    def run(self) -> None:
        last_note = time.monotonic()
        while not self.done.is_set():
            self.poll()
            if time.monotonic() - last_note >= 15:
                last_note = time.monotonic()
                tail = self.log_path.read_bytes()[-400:].decode(errors="replace").strip().splitlines()
                log(f"  [{len(self.hwm_kb)} process(es), peak RSS {max(self.hwm_kb.values(), default=0) / 2**20:.2f} "
                    f"GiB] {tail[-1] if tail else ''}")
            self.done.wait(0.5)


def start_monitored(cmd: list[str], run_env: dict, log_path: Path,
                    stdout_path: Path | None = None) -> tuple[subprocess.Popen, TreeMonitor]:
    """``cmd`` started in a session of its own (stderr, and stdout unless ``stdout_path`` is
    given, to ``log_path``) with a monitor of every process of that session."""
    with log_path.open("wb") as out, (stdout_path or log_path).open("ab") as stdout:
        proc = subprocess.Popen(cmd, env=run_env, stdout=stdout if stdout_path else out, stderr=out,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    monitor = TreeMonitor(proc.pid, log_path)
    monitor.start()
    return proc, monitor


def cpu_ticks(pid: int | None) -> int:
    """utime + stime of a process (0 when there is none): the broker's share of a run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError, TypeError):
        return 0


BROKER_PID: list[int | None] = [None]  # the local broker's pid, when this machine runs it


def timed_process(label: str, cmd: list[str], run_env: dict, log_path: Path, timeout_s: float,
                  stdout_path: Path | None = None) -> dict:
    """Runs ``cmd`` in a session of its own (output to ``log_path``; stdout to ``stdout_path``
    when given) until it exits or ``timeout_s`` passes: wall time, CPU time and peak RSS of
    every process of the session."""
    log(f"{label}: {' '.join(shlex.quote(c) for c in cmd)}  (log {log_path})")
    broker0 = cpu_ticks(BROKER_PID[0])
    started = time.perf_counter()
    proc, monitor = start_monitored(cmd, run_env, log_path, stdout_path)
    killer = threading.Timer(timeout_s, lambda: (log(f"{label}: over {timeout_s:.0f} s; stopping it"),
                                                  os.killpg(proc.pid, signal.SIGTERM)))
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:  # the harness itself stopped (SIGINT, SIGTERM): stop the run's session too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        raise
    finally:
        killer.cancel()
    wall = time.perf_counter() - started
    broker_cpu_s = (cpu_ticks(BROKER_PID[0]) - broker0) / CLK_TCK
    proc.returncode = os.waitstatus_to_exitcode(status)
    monitor.done.set()
    monitor.join()
    left = monitor.poll()
    if left:  # processes of the run still alive after it exited: ours, ended by their group
        log(f"{label}: {len(left)} process(es) left in the run's session after it exited; ending them")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    cpu_s = max(usage.ru_utime + usage.ru_stime, sum(monitor.ticks.values()) / CLK_TCK)
    # the polled peaks only: a child's ru_maxrss on Linux counts its parent's pages at fork (this
    # harness, 1.7 GiB after the raw loop), not what the run itself used
    peak_kb = max(monitor.hwm_kb.values(), default=usage.ru_maxrss)
    if proc.returncode != 0:
        log(f"{label}: exited {proc.returncode}; last lines of {log_path}:\n"
            + log_path.read_bytes()[-3000:].decode(errors="replace"))
    return {"command": " ".join(cmd), "exit": proc.returncode, "wall_s": round(wall, 2),
            "cpu_s": round(cpu_s, 1), "cpu_pct": round(100 * cpu_s / wall), "processes": len(monitor.hwm_kb),
            "peak_rss_gib": round(peak_kb / 2**20, 2),
            "peak_rss_by_process": monitor.peak_rss_gib(),
            "cpu_s_by_process": {f"{monitor.names.get(p, '?')}[{p}]": round(t / CLK_TCK, 1)
                                 for p, t in sorted(monitor.ticks.items())},
            "broker_cpu_s": round(broker_cpu_s, 1)}
