"""What one reader login of ClickHouse may use, as tested values.

Per query, a settings profile whose limits a reader cannot lift: ``readonly = 2`` (reads, and
per-query settings, never ``readonly`` itself), and constraints on the time, memory and
result size of one query. ``max_memory_usage`` and ``max_result_rows`` are ``READONLY``;
``max_execution_time`` may be lowered but not raised or set to 0 (unlimited) — a range, not
a constant, because the Grafana ClickHouse plugin's driver sets it on every query to the
datasource's timeout. Per hour, a quota counted per login (``KEYED BY user_name``): queries,
errors, rows read and returned, and query time. Every reader role gets both; the writer
neither (it writes batches of any size).

The same limits render two ways: SQL for a server (``profile_sql``, ``quota_sql``) and the
``users.xml`` profile and quota of the embedded engine's one identity (``profile_xml``,
``quota_xml``); the engine enforces both (constraints and quotas of users.xml), so the tests
exercise them there.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

__all__ = ["ReaderLimits", "profile_sql", "profile_xml", "quota_sql", "quota_xml"]

# clickhouse-connect reads ``system.settings`` (about 2,000 rows) when it connects: a result
# limit below that would refuse the driver itself.
MIN_RESULT_ROWS = 10_000


@dataclass(frozen=True)
class ReaderLimits:
    """Per-query limits (seconds, bytes, rows) and the hourly quota of each reader login."""

    max_execution_time_s: int = 60
    max_memory_usage_bytes: int = 4 << 30
    max_result_rows: int = 1_000_000
    quota_interval_s: int = 3600
    quota_queries: int = 10_000
    quota_errors: int = 1_000
    quota_result_rows: int = 100_000_000
    quota_read_rows: int = 100_000_000_000
    quota_execution_time_s: int = 36_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{f.name}: a positive integer (0 would mean unlimited), got {value!r}")
        if self.max_result_rows < MIN_RESULT_ROWS:
            raise ValueError(f"max_result_rows: at least {MIN_RESULT_ROWS} (the driver reads system.settings "
                             "when it connects)")

    def settings(self) -> list[tuple[str, int, str]]:
        """(setting, value, constraint) of the reader profile; constraint ``const`` or ``range``
        (from 1 to the value)."""
        return [("readonly", 2, ""),
                ("max_execution_time", self.max_execution_time_s, "range"),
                ("max_memory_usage", self.max_memory_usage_bytes, "const"),
                ("max_result_rows", self.max_result_rows, "const")]

    def quota(self) -> dict[str, int]:
        """Resource -> the most one login may use per ``quota_interval_s``."""
        return {"queries": self.quota_queries, "errors": self.quota_errors, "result_rows": self.quota_result_rows,
                "read_rows": self.quota_read_rows, "execution_time": self.quota_execution_time_s}


def _to(roles: Sequence[str]) -> str:
    if not roles:
        raise ValueError("a profile or quota applies to at least one role")
    return ", ".join(f"`{r}`" for r in roles)


def profile_sql(name: str, limits: ReaderLimits, roles: Sequence[str]) -> str:
    parts = []
    for setting, value, constraint in limits.settings():
        suffix = {"": "", "const": " READONLY", "range": f" MIN 1 MAX {value}"}[constraint]
        parts.append(f"{setting} = {value}{suffix}")
    return f"CREATE SETTINGS PROFILE OR REPLACE `{name}` SETTINGS {', '.join(parts)} TO {_to(roles)}"


def quota_sql(name: str, limits: ReaderLimits, roles: Sequence[str]) -> str:
    maxima = ", ".join(f"{k} = {v}" for k, v in limits.quota().items())
    return (f"CREATE QUOTA OR REPLACE `{name}` KEYED BY user_name FOR INTERVAL {limits.quota_interval_s} second "
            f"MAX {maxima} TO {_to(roles)}")


def profile_xml(limits: ReaderLimits) -> str:
    """The settings and ``<constraints>`` of a users.xml profile."""
    values = "".join(f"<{s}>{v}</{s}>" for s, v, _ in limits.settings())
    constraints = "".join(
        f"<{s}><readonly/></{s}>" if c == "const" else f"<{s}><min>1</min><max>{v}</max></{s}>"
        for s, v, c in limits.settings() if c)
    return f"{values}<constraints>{constraints}</constraints>"


def quota_xml(limits: ReaderLimits) -> str:
    """One ``<interval>`` of a users.xml quota (counted per user, as the SQL quota)."""
    maxima = "".join(f"<{k}>{v}</{k}>" for k, v in limits.quota().items())
    return f"<interval><duration>{limits.quota_interval_s}</duration>{maxima}</interval>"
