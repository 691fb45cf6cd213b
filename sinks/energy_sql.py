"""GPU energy per class and tenant in a window, for a rate card that prices energy
(domain/energy.py splits it; domain/pricing.py prices it).

Energy is DCGM power integrated over each sample's span, per physical GPU: the power series
is the GPU's (the MIG parent's; the one series time-slice replicas share), so it is counted
once per GPU, whatever number of devices the sample was attributed to. A tenant's part of a
sample is the capacity it held then: per utilization fact, the capacity fact's
``capacity_fraction`` x the fact's span (a sample split at a capacity edge counts each part
for its time) x the GPU's power.
"""

from __future__ import annotations

__all__ = ["energy_sql"]


def energy_sql(db: str) -> str:
    """Rows (gpu_class, tenant_id, confidence, joules) in ``[%(f)s, %(t)s)``: one row per
    class with tenant '' (every GPU's energy), then each tenant's part by the confidence of
    the capacity it held.

    Aggregated as it is read, so a month of a fleet's samples never sits in memory: the only
    tables built for a join are the allocated capacity facts and the MIG parents' power (a
    MIG instance's series carries no power: its part is its share of the parent's at that
    time). A GPU's own series is its exclusive or MIG-parent series, or a time-sliced GPU's
    first replica (every replica carries the one physical series)."""
    window = "observed_at_ms >= %(f)s AND observed_at_ms < %(t)s"
    return f"""WITH
        parent AS (SELECT gpu_uuid, observed_at_ms, max(power_w) AS w FROM {db}.utilization_facts FINAL
                   WHERE {window} AND device_id = gpu_uuid AND power_w IS NOT NULL
                     AND gpu_uuid IN (SELECT gpu_uuid FROM {db}.utilization_facts
                                      WHERE {window} AND startsWith(device_id, 'MIG-'))
                   GROUP BY gpu_uuid, observed_at_ms),
        cls AS (SELECT gpu_uuid, any(gpu_class) AS gpu_class FROM {db}.capacity_facts FINAL
                WHERE valid_from_ms < %(t)s AND valid_to_ms > %(f)s GROUP BY gpu_uuid)
        SELECT cls.gpu_class AS gpu_class, '' AS tenant_id, '' AS confidence, sum(g.joules) AS joules
        FROM (SELECT gpu_uuid, sum(power_w * span_ms) / 1000 AS joules FROM {db}.utilization_facts FINAL
              WHERE {window} AND power_w IS NOT NULL AND (device_id = gpu_uuid OR endsWith(device_id, '::0'))
              GROUP BY gpu_uuid) AS g
        INNER JOIN cls ON cls.gpu_uuid = g.gpu_uuid
        GROUP BY gpu_class
        UNION ALL
        SELECT cls.gpu_class AS gpu_class, h.tenant_id AS tenant_id, h.confidence AS confidence,
               sum(h.joules) AS joules
        FROM (SELECT u.gpu_uuid AS gpu_uuid, c.tenant_id AS tenant_id, c.confidence AS confidence,
                     sum(c.capacity_fraction * u.span_ms
                         * if(startsWith(u.device_id, 'MIG-'), p.w, coalesce(u.power_w, 0))) / 1000 AS joules
              FROM {db}.utilization_facts AS u FINAL
              INNER JOIN (SELECT fact_id, tenant_id, confidence, capacity_fraction FROM {db}.capacity_facts FINAL
                          WHERE kind = 'allocated' AND tenant_id != '') AS c ON c.fact_id = u.capacity_fact_id
              LEFT JOIN parent AS p ON p.gpu_uuid = u.gpu_uuid AND p.observed_at_ms = u.observed_at_ms
              WHERE u.observed_at_ms >= %(f)s AND u.observed_at_ms < %(t)s
              GROUP BY gpu_uuid, tenant_id, confidence) AS h
        INNER JOIN cls ON cls.gpu_uuid = h.gpu_uuid
        GROUP BY gpu_class, tenant_id, confidence"""
