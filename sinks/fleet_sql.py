"""Fleet queries for the Prometheus exporter (sinks/fleet_metrics.py), SQL as tested values.

Every query reads one recent window of event time, half-open ``[f, t)`` in ms (parameters
``f`` and ``t``), facts FINAL (deduplicated). Quantities over the window are GPU-milliseconds
(fraction x clipped duration); the exporter divides them by the window length to get the
mean GPU-equivalents held over the window. ``e`` is the last instant of the window (t - 1),
for things counted as of the window's end.
"""

from __future__ import annotations

from gpuledger.sinks.reference_sql import history_sql
from gpuledger.sinks.coverage_sql import IN_WINDOW, samples_by_capacity_fact_sql
from gpuledger.sinks.showback_sql import CLIPPED_GPU_MS, evidence_end_sql

__all__ = ["allocated_holdings_sql", "class_gpus_sql", "dark_gpus_sql", "evidence_end_sql", "held_sql",
           "quotas_sql", "request_latency_sql", "unattributed_sql", "unavailable_sql"]



def unattributed_sql(db: str) -> str:
    """GPU-ms allocated with no defensible tenant (confidence 'unattributed'), by reason text."""
    return f"""SELECT cluster_id, reason, sum({CLIPPED_GPU_MS}) AS gpu_ms
        FROM {db}.capacity_facts FINAL
        WHERE kind = 'allocated' AND confidence = 'unattributed' AND {IN_WINDOW}
        GROUP BY cluster_id, reason ORDER BY cluster_id, reason"""


def allocated_holdings_sql(db: str) -> str:
    """Per tenant and node: GPU-ms held, and GPU-ms held by holdings (one pod or VM on one
    device over the window) whose mean SM-active ratio over their DCGM samples is below
    ``%(idle)s``. A holding without samples is telemetry-unknown, never idle: its GPU-ms are
    reported apart."""
    return f"""SELECT cluster_id, tenant_id, node, sum(gpu_ms) AS held_ms,
            sumIf(gpu_ms, span_ms > 0 AND active_ms < %(idle)s * span_ms) AS idle_ms,
            sumIf(gpu_ms, span_ms = 0) AS unknown_ms
        FROM (
            SELECT c.cluster_id AS cluster_id, c.tenant_id AS tenant_id, c.node AS node, c.pod_uid AS pod_uid,
                   c.device_id AS device_id, sum(c.gpu_ms) AS gpu_ms, sum(u.span) AS span_ms,
                   sum(u.act) AS active_ms
            FROM (SELECT fact_id, cluster_id, tenant_id, node, pod_uid, device_id, {CLIPPED_GPU_MS} AS gpu_ms
                  FROM {db}.capacity_facts FINAL
                  WHERE kind = 'allocated' AND tenant_id != '' AND {IN_WINDOW}) AS c
            LEFT JOIN ({samples_by_capacity_fact_sql(db)}) AS u ON u.capacity_fact_id = c.fact_id
            GROUP BY cluster_id, tenant_id, node, pod_uid, device_id)
        GROUP BY cluster_id, tenant_id, node ORDER BY cluster_id, tenant_id, node"""


def dark_gpus_sql(db: str) -> str:
    """Per node: inventory GPUs in service at the window's end (not unavailable during the
    window) with no DCGM sample in the window, and how many of the node's GPUs had one."""
    return f"""SELECT g.cluster_id, g.node, countIf(s.samples = 0) AS dark, countIf(s.samples > 0) AS reporting
        FROM (SELECT DISTINCT cluster_id, node, gpu_uuid FROM {db}.inventory_gpus FINAL
              WHERE valid_from_ms <= %(e)s AND (valid_to_ms IS NULL OR %(e)s < valid_to_ms)
                AND (cluster_id, gpu_uuid) NOT IN (SELECT cluster_id, gpu_uuid FROM {db}.inventory_unavailable FINAL
                                                   WHERE to_ms > %(f)s AND from_ms < %(t)s)) AS g
        LEFT JOIN (SELECT cluster_id, gpu_uuid, count() AS samples FROM {db}.utilization_facts FINAL
                   WHERE observed_at_ms >= %(f)s AND observed_at_ms < %(t)s
                   GROUP BY cluster_id, gpu_uuid) AS s ON s.cluster_id = g.cluster_id AND s.gpu_uuid = g.gpu_uuid
        GROUP BY g.cluster_id, g.node ORDER BY g.cluster_id, g.node"""


def unavailable_sql(db: str) -> str:
    """GPU-ms of the inventory's unavailability windows (maintenance, failures) in the window, by reason."""
    return f"""SELECT cluster_id, reason, sum(least(to_ms, %(t)s) - greatest(from_ms, %(f)s)) AS gpu_ms
        FROM {db}.inventory_unavailable FINAL WHERE to_ms > %(f)s AND from_ms < %(t)s
        GROUP BY cluster_id, reason ORDER BY cluster_id, reason"""


def class_gpus_sql(db: str) -> str:
    """Physical GPUs per class in the inventory at the window's end, and how many of them are unavailable then."""
    return f"""SELECT cluster_id, gpu_class, uniqExact(gpu_uuid) AS gpus,
            uniqExactIf(gpu_uuid, (cluster_id, gpu_uuid) IN (
                SELECT cluster_id, gpu_uuid FROM {db}.inventory_unavailable FINAL
                WHERE from_ms <= %(e)s AND %(e)s < to_ms)) AS unavailable
        FROM {db}.inventory_gpus FINAL
        WHERE valid_from_ms <= %(e)s AND (valid_to_ms IS NULL OR %(e)s < valid_to_ms)
        GROUP BY cluster_id, gpu_class ORDER BY cluster_id, gpu_class"""


def held_sql(db: str) -> str:
    """Every allocated interval with a tenant in the window, for the guaranteed/borrowed sweep (domain/quota.py)."""
    return f"""SELECT cluster_id, tenant_id, gpu_class, valid_from_ms, valid_to_ms, capacity_fraction
        FROM {db}.capacity_facts FINAL WHERE kind = 'allocated' AND tenant_id != '' AND {IN_WINDOW}"""


def quotas_sql(db: str) -> str:
    """Every quotas document of each cluster (``%(kind)s`` = 'quotas'), the latest publication
    first: (cluster, published_at_ms, observed_at_ms, document); the quotas in force are chosen
    from them (domain/reference_history.py)."""
    return history_sql(db, every_cluster=True)


def request_latency_sql(db: str) -> str:
    """Per endpoint: finished requests in the window, failed ones, and queue-time and
    time-to-first-token quantiles (p50, p95, p99; exact) over the requests that report them."""
    return f"""SELECT cluster_id, endpoint_id, count() AS requests, countIf(outcome != 'success') AS failed,
            quantilesExact(0.5, 0.95, 0.99)(queue_s) AS queue_q, quantilesExact(0.5, 0.95, 0.99)(ttft_s) AS ttft_q,
            count(queue_s) AS with_queue, count(ttft_s) AS with_ttft
        FROM {db}.request_facts FINAL WHERE observed_at_ms >= %(f)s AND observed_at_ms < %(t)s
        GROUP BY cluster_id, endpoint_id ORDER BY cluster_id, endpoint_id"""
