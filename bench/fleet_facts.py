"""The facts a benchmark run wrote, as counts and a content digest, so that runs with different
worker counts can be compared fact for fact: ``python -m gpuledger.bench.fleet_facts HOME``
prints JSON. Per fact table: the rows stored (before ``FINAL``: what at-least-once delivery
wrote twice shows here), the facts (after ``FINAL``), and the sum of a hash of every fact's
columns except its source position (as text: a NULL in a
Nullable column does not make the hash NULL). Runs in its own process: one embedded engine per process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

__all__ = ["fact_digest"]

TABLES = ("capacity_facts", "utilization_facts", "request_facts", "demand_facts")
SQL = """SELECT (SELECT count() FROM {db}.{t}), count(), toString(sum(h)) FROM (
           SELECT cityHash64(toString(tuple(* EXCEPT (src_topic, src_partition, src_offset)))) AS h
           FROM {db}.{t} FINAL)"""
DEMAND_SQL = """SELECT (SELECT count() FROM {db}.{t}), count(), toString(sum(h)) FROM (
           SELECT cityHash64(toString(tuple(*))) AS h FROM {db}.{t} FINAL)"""


def digest(dsn: str, database: str = "gpuledger") -> dict:
    from gpuledger.sinks.clickhouse import ClickHouseStore
    store = ClickHouseStore(dsn, database)
    out = {}
    for t in TABLES:
        columns = {r[0] for r in store.query(f"SELECT name FROM system.columns WHERE database = '{database}' "
                                             f"AND table = '{t}'")[1]}
        sql = SQL if "src_offset" in columns else DEMAND_SQL
        rows, facts, total = store.query(sql.format(db=database, t=t))[1][0]
        out[t] = {"rows_stored": rows, "facts": facts, "digest": total}
    return out


def fact_digest(home: Path, env: dict | None = None) -> dict:
    """``digest`` of a run's home, in a child process."""
    done = subprocess.run([sys.executable, "-m", "gpuledger.bench.fleet_facts", str(home)], env=env,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return orjson.loads(done.stdout)


if __name__ == "__main__":
    sys.stdout.write(orjson.dumps(digest(f"chdb://{Path(sys.argv[1]) / 'clickhouse'}")).decode())
