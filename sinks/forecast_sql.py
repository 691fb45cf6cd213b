"""The forecast's queries (SQL as tested values) and its table.

Every series is hourly over the half-open history ``[%(f)s, %(t)s)``: an interval is cut at
hour edges (``arrayJoin`` over the hours it touches) and each hour gets its GPU-milliseconds
÷ one hour, i.e. the mean GPU-equivalents of that hour. Facts are read FINAL (deduplicated).
"""

from __future__ import annotations

import orjson

from gpuledger.domain.capacity_plan import ServiceThroughput, parse_throughput
from gpuledger.domain.demand_forecast import ROW_COLUMNS
from gpuledger.domain.quota import Quota
from gpuledger.domain.reference_history import in_force
from gpuledger.sinks.query import QueryPort
from gpuledger.sinks.reference_sql import history_sql
from gpuledger.sinks.scheduler_sql import node_class_sql
from gpuledger.sinks.showback_sql import WAIT_OUTCOMES

__all__ = ["FORECAST_COLUMNS", "UNKNOWN_CLASS", "evidence_span_ms", "read_forecast_inputs", "write_forecast_rows"]

H = 3_600_000
UNKNOWN_CLASS = "unknown"  # the GPU class of unmet demand no node or MIG profile names
# the hours an interval [a, b) touches inside the window, as hour indexes since 1970
_HOURS = ("arrayJoin(range(intDiv(greatest({a}, toInt64(%(f)s)), 3600000), "
          "intDiv(least({b}, toInt64(%(t)s)) - 1, 3600000) + 1))")
_HOUR_MS = "least({b}, (h + 1) * 3600000) - greatest({a}, h * 3600000)"


def capacity_hourly_sql(db: str) -> str:
    """GPU-equivalents held (``allocated``) and out of service (``unavailable``) per class and hour."""
    return f"""SELECT gpu_class, profile, mode, kind, h * 3600000 AS hour_ms,
            sum(capacity_fraction * ({_HOUR_MS.format(a='valid_from_ms', b='valid_to_ms')})) / 3600000 AS gpus
        FROM (SELECT gpu_class, profile, mode, kind, capacity_fraction, valid_from_ms, valid_to_ms,
                     {_HOURS.format(a='valid_from_ms', b='valid_to_ms')} AS h
              FROM {db}.capacity_facts FINAL
              WHERE kind IN ('allocated', 'unavailable') AND valid_to_ms > %(f)s AND valid_from_ms < %(t)s)
        GROUP BY gpu_class, profile, mode, kind, hour_ms ORDER BY gpu_class, profile, mode, kind, hour_ms"""


def active_hourly_sql(db: str) -> str:
    """GPU-equivalents × SM-active ratio per class and hour (a sample counts in its own hour)."""
    return f"""SELECT c.gpu_class, c.profile, c.mode, intDiv(u.observed_at_ms, 3600000) * 3600000 AS hour_ms,
            sum(u.span_ms * coalesce(u.sm_active_ratio, 0) * c.capacity_fraction) / 3600000 AS gpus
        FROM (SELECT capacity_fact_id, observed_at_ms, span_ms, sm_active_ratio FROM {db}.utilization_facts FINAL
              WHERE capacity_fact_id != '' AND observed_at_ms >= %(f)s AND observed_at_ms < %(t)s) AS u
        INNER JOIN (SELECT fact_id, gpu_class, profile, mode, capacity_fraction FROM {db}.capacity_facts FINAL
                    WHERE kind = 'allocated' AND valid_to_ms > %(f)s AND valid_from_ms < %(t)s) AS c
            ON c.fact_id = u.capacity_fact_id
        GROUP BY c.gpu_class, c.profile, c.mode, hour_ms ORDER BY c.gpu_class, c.profile, c.mode, hour_ms"""


def unmet_hourly_sql(db: str) -> str:
    """Queue pressure: GPU-equivalents of pods waiting (demand facts of waits) per class and
    hour. A wait's class is the class of the node the pod was bound to (the inventory's, as
    sinks/scheduler_sql.py gives it), else the class that offers its MIG profile, else
    ``UNKNOWN_CLASS``: a whole-GPU pod never bound names no class (the facts do not keep what
    the pod asked of a node). A MIG profile weighs what its instances weigh in the capacity
    facts (a profile nobody offers: weight 1)."""
    return f"""SELECT multiIf(n.gpu_class != '', n.gpu_class, p.gpu_class != '', p.gpu_class, '{UNKNOWN_CLASS}')
              AS gpu_class,
            d.profile, if(d.profile = '', 'exclusive', 'mig') AS mode, d.h * 3600000 AS hour_ms,
            sum(d.instances * if(p.weight > 0, p.weight, 1.0)
                * ({_HOUR_MS.format(a='d.waited_from_ms', b='d.waited_to_ms')})) / 3600000 AS gpus
        FROM (SELECT cluster_id, node, profile, instances, waited_from_ms, waited_to_ms,
                     {_HOURS.format(a='waited_from_ms', b='waited_to_ms')} AS h
              FROM {db}.demand_facts FINAL
              WHERE outcome IN ({WAIT_OUTCOMES}) AND waited_to_ms > %(f)s AND waited_from_ms < %(t)s) AS d
        LEFT JOIN ({node_class_sql(db)}) AS n ON n.cluster_id = d.cluster_id AND n.node = d.node
        LEFT JOIN (SELECT profile, any(gpu_class) AS gpu_class, avg(capacity_fraction) AS weight
                   FROM {db}.capacity_facts FINAL WHERE mode = 'mig' AND profile != '' GROUP BY profile) AS p
            ON p.profile = d.profile
        GROUP BY gpu_class, d.profile, mode, hour_ms ORDER BY gpu_class, d.profile, hour_ms"""


def productive_hourly_sql(db: str) -> str:
    """Successful requests' tokens per second per model and hour, on the class that serves
    the endpoint (the class, profile and mode of most of its GPU-hours in the window)."""
    return f"""SELECT e.gpu_class, e.profile, e.mode, r.model, r.hour_ms, r.tokens / 3600 AS tokens_per_s
        FROM (SELECT endpoint_id, model, intDiv(observed_at_ms, 3600000) * 3600000 AS hour_ms,
                     sum(input_tokens + output_tokens) AS tokens
              FROM {db}.request_facts FINAL
              WHERE outcome = 'success' AND observed_at_ms >= %(f)s AND observed_at_ms < %(t)s
              GROUP BY endpoint_id, model, hour_ms) AS r
        LEFT JOIN (SELECT endpoint_id, argMax(gpu_class, gpu_ms) AS gpu_class, argMax(profile, gpu_ms) AS profile,
                          argMax(mode, gpu_ms) AS mode
                   FROM (SELECT endpoint_id, gpu_class, profile, mode,
                                sum(capacity_fraction * (least(valid_to_ms, %(t)s) - greatest(valid_from_ms, %(f)s)))
                                    AS gpu_ms
                         FROM {db}.capacity_facts FINAL
                         WHERE kind = 'allocated' AND endpoint_id != '' AND valid_to_ms > %(f)s
                           AND valid_from_ms < %(t)s
                         GROUP BY endpoint_id, gpu_class, profile, mode)
                   GROUP BY endpoint_id) AS e ON e.endpoint_id = r.endpoint_id
        ORDER BY e.gpu_class, e.profile, e.mode, r.model, r.hour_ms"""


def inventory_nodes_sql(db: str) -> str:
    """GPUs per class and node in the inventory at ``%(at)s``."""
    return f"""SELECT gpu_class, node, count() FROM {db}.inventory_gpus FINAL
        WHERE valid_from_ms <= %(at)s AND coalesce(valid_to_ms, %(at)s + 1) > %(at)s
        GROUP BY gpu_class, node ORDER BY gpu_class, node"""


def documents_sql(db: str) -> str:
    """The newest document of a kind per cluster."""
    return f"""SELECT cluster_id, argMax(document, observed_at_ms) FROM {db}.reference_documents FINAL
        WHERE kind = %(kind)s GROUP BY cluster_id ORDER BY cluster_id"""


def evidence_span_ms(reader: QueryPort) -> tuple[int, int] | None:
    """(first start, last end) of the capacity facts; None without any."""
    _, rows = reader.query(f"SELECT min(valid_from_ms), max(valid_to_ms), count() FROM {reader.db}.capacity_facts")
    return (int(rows[0][0]), int(rows[0][1])) if rows and rows[0][2] else None


def _documents(reader: QueryPort, kind: str, parse) -> list:
    out = []
    for _, document in reader.query(documents_sql(reader.db), {"kind": kind})[1]:
        out += parse(orjson.loads(document))
    return out


def _quotas(reader: QueryPort) -> list[Quota]:
    """The quotas in force of every cluster (domain/reference_history.py)."""
    documents: dict[str, list[str]] = {}
    for cluster, _, _, document in reader.query(history_sql(reader.db, every_cluster=True), {"kind": "quotas"})[1]:
        documents.setdefault(cluster, []).append(document)
    return [q for docs in documents.values() for q in in_force("quotas", docs).parsed]


def read_forecast_inputs(reader: QueryPort, from_ms: int, to_ms: int) -> tuple[dict, list[Quota],
                                                                                list[ServiceThroughput], dict]:
    """(points, quotas, throughput entries, GPUs by class and node at ``to_ms``) for
    ``domain.demand_forecast.ForecastInputs``."""
    db, p = reader.db, {"f": from_ms, "t": to_ms}
    points: dict[tuple, list] = {}
    for gpu_class, profile, mode, kind, hour_ms, gpus in reader.query(capacity_hourly_sql(db), p)[1]:
        points.setdefault((gpu_class, profile, mode, "", f"{kind}_gpus"), []).append((int(hour_ms), float(gpus)))
    for measure, sql in (("active_gpus", active_hourly_sql(db)), ("unmet_gpus", unmet_hourly_sql(db))):
        for gpu_class, profile, mode, hour_ms, gpus in reader.query(sql, p)[1]:
            points.setdefault((gpu_class or "", profile, mode, "", measure), []).append((int(hour_ms), float(gpus)))
    for gpu_class, profile, mode, model, hour_ms, rate in reader.query(productive_hourly_sql(db), p)[1]:
        points.setdefault((gpu_class or "", profile or "", mode or "", model, "productive_tokens_per_s"),
                          []).append((int(hour_ms), float(rate)))
    nodes: dict[str, dict[str, int]] = {}
    for gpu_class, node, n in reader.query(inventory_nodes_sql(db), {"at": to_ms - 1})[1]:
        nodes.setdefault(gpu_class, {})[node] = int(n)
    return (points, _quotas(reader), _documents(reader, "throughput", parse_throughput),
            nodes)


FORECAST_COLUMNS = ["as_of_ms", *[c if c != "bucket_start" else "bucket_start_ms" for c in ROW_COLUMNS]]


def write_forecast_rows(store, as_of_ms: int, rows: list[dict]) -> int:
    """Insert the document's rows (``domain.demand_forecast.forecast_rows``) into
    ``capacity_forecasts`` (schema_sql.py); ``store`` is a ``ClickHouseStore`` (the engine itself)."""
    store.insert("capacity_forecasts", [[as_of_ms, *[r[c] for c in ROW_COLUMNS]] for r in rows], FORECAST_COLUMNS)
    return len(rows)
