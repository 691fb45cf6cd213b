"""GPU energy per class and tenant in a window, for a rate card that prices energy
(domain/energy.py splits it; domain/pricing.py prices it).

Energy is DCGM power integrated over each sample's span, per physical GPU: the power series
is the GPU's (the MIG parent's; the one series time-slice replicas share), so it is taken once
per GPU and sample time, whatever number of devices the sample was attributed to. A tenant's
part of a sample is the capacity it held then: per utilization fact of that GPU and time,
the capacity fact's ``capacity_fraction`` x the fact's part of its device's sample span
(a sample split at a capacity edge counts each part for its time).
"""

from __future__ import annotations

__all__ = ["energy_sql"]


def energy_sql(db: str) -> str:
    """Rows (gpu_class, tenant_id, confidence, joules) in ``[%(f)s, %(t)s)``: one row per
    class with tenant '' (every GPU's energy), then each tenant's part by the confidence of
    the capacity it held."""
    return f"""WITH
        dev AS (SELECT gpu_uuid, device_id, observed_at_ms, sum(span_ms) AS span, max(power_w) AS w
                FROM {db}.utilization_facts FINAL
                WHERE observed_at_ms >= %(f)s AND observed_at_ms < %(t)s
                GROUP BY gpu_uuid, device_id, observed_at_ms),
        gpu AS (SELECT gpu_uuid, observed_at_ms,
                       -- the physical series (exclusive GPU, MIG parent) where there is one, else
                       -- the series time-slice replicas share (the same power on each)
                       if(countIf(device_id = gpu_uuid) > 0, maxIf(span, device_id = gpu_uuid), max(span))
                       * if(countIf(device_id = gpu_uuid) > 0, maxIf(w, device_id = gpu_uuid), max(w)) / 1000 AS joules
                FROM dev WHERE w IS NOT NULL GROUP BY gpu_uuid, observed_at_ms),
        held AS (SELECT u.gpu_uuid AS gpu_uuid, u.observed_at_ms AS observed_at_ms, c.tenant_id AS tenant_id,
                        c.confidence AS confidence, sum(c.capacity_fraction * u.span_ms / d.span) AS share
                 FROM {db}.utilization_facts AS u FINAL
                 INNER JOIN (SELECT fact_id, tenant_id, confidence, capacity_fraction FROM {db}.capacity_facts FINAL
                             WHERE kind = 'allocated' AND tenant_id != '') AS c ON c.fact_id = u.capacity_fact_id
                 INNER JOIN dev AS d ON d.gpu_uuid = u.gpu_uuid AND d.device_id = u.device_id
                                    AND d.observed_at_ms = u.observed_at_ms
                 WHERE u.observed_at_ms >= %(f)s AND u.observed_at_ms < %(t)s AND d.span > 0
                 GROUP BY gpu_uuid, observed_at_ms, tenant_id, confidence),
        cls AS (SELECT gpu_uuid, any(gpu_class) AS gpu_class FROM {db}.capacity_facts FINAL
                WHERE valid_from_ms < %(t)s AND valid_to_ms > %(f)s GROUP BY gpu_uuid)
        SELECT cls.gpu_class AS gpu_class, '' AS tenant_id, '' AS confidence, sum(gpu.joules) AS joules
        FROM gpu INNER JOIN cls ON cls.gpu_uuid = gpu.gpu_uuid
        GROUP BY gpu_class
        UNION ALL
        SELECT cls.gpu_class AS gpu_class, held.tenant_id AS tenant_id, held.confidence AS confidence,
               sum(gpu.joules * held.share) AS joules
        FROM gpu INNER JOIN held ON held.gpu_uuid = gpu.gpu_uuid AND held.observed_at_ms = gpu.observed_at_ms
        INNER JOIN cls ON cls.gpu_uuid = gpu.gpu_uuid
        GROUP BY gpu_class, tenant_id, confidence"""
