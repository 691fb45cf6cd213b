"""GPU energy per class and tenant in a window, for a rate card that prices energy
(domain/energy.py splits it; domain/pricing.py prices it).

Energy is DCGM power integrated over each sample's span, per physical GPU: the power series
is the GPU's (the MIG parent's; the one series time-slice replicas share), so it is counted
once per GPU, whatever number of devices the sample was attributed to. A tenant's part of a
sample is the capacity it held then: per utilization fact, the capacity fact's
``capacity_fraction`` x the fact's span (a sample split at a capacity edge counts each part
for its time) x the GPU's power.

Tenants' parts are read a chunk of allocated capacity facts at a time (sinks/coverage_sql.py),
so the join with the facts never holds a month of them.
"""

from __future__ import annotations

from gpuledger.domain.cadence import MAX_STALE_CEILING_MS
from gpuledger.sinks.coverage_sql import (
    CHUNK_FACTS, OBSERVED_IN_CHUNK, allocated_where, buckets_sql, chunks, samples_where, summed)
from gpuledger.sinks.query import QueryPort

__all__ = ["energy_sql", "energy_tenants_sql", "energy_totals_sql", "read_energy_rows"]

WINDOW = "observed_at_ms >= %(f)s AND observed_at_ms < %(t)s"
# Every allocated fact a sample observed in the window can be over: a sample part keeps its
# sample's time, at most a stale ceiling before the part's start.
HELD = (f"kind = 'allocated' AND tenant_id != '' AND valid_to_ms > %(f)s "
        f"AND valid_from_ms < %(t)s + {MAX_STALE_CEILING_MS}")


def _classes(db: str) -> str:
    return f"""SELECT gpu_uuid, any(gpu_class) AS gpu_class FROM {db}.capacity_facts FINAL
               WHERE valid_from_ms < %(t)s AND valid_to_ms > %(f)s GROUP BY gpu_uuid"""


def energy_totals_sql(db: str) -> str:
    """Rows (gpu_class, '', '', joules): every GPU's energy per class. A GPU's own series is its
    exclusive or MIG-parent series, or a time-sliced GPU's first replica (every replica
    carries the one physical series)."""
    return f"""SELECT cls.gpu_class AS gpu_class, '' AS tenant_id, '' AS confidence, sum(g.joules) AS joules
        FROM (SELECT gpu_uuid, sum(power_w * span_ms) / 1000 AS joules FROM {db}.utilization_facts FINAL
              WHERE {WINDOW} AND power_w IS NOT NULL AND (device_id = gpu_uuid OR endsWith(device_id, '::0'))
              GROUP BY gpu_uuid) AS g
        INNER JOIN ({_classes(db)}) AS cls ON cls.gpu_uuid = g.gpu_uuid
        GROUP BY gpu_class"""


def energy_tenants_sql(db: str, chunked: bool = False) -> str:
    """Rows (gpu_class, tenant_id, confidence, joules): each tenant's part by the confidence of
    the capacity it held (with ``chunked``, of the chunk's facts). A MIG instance's series
    carries no power: its part is its share of the parent's at that time."""
    samples = samples_where(db, chunked, HELD)
    return f"""WITH
        parent AS (SELECT gpu_uuid, observed_at_ms, max(power_w) AS w FROM {db}.utilization_facts FINAL
                   WHERE {WINDOW} AND device_id = gpu_uuid AND power_w IS NOT NULL
                     {f"AND {OBSERVED_IN_CHUNK}" if chunked else ""}
                     AND gpu_uuid IN (SELECT gpu_uuid FROM {db}.utilization_facts
                                      WHERE {WINDOW} AND startsWith(device_id, 'MIG-'))
                   GROUP BY gpu_uuid, observed_at_ms)
        SELECT cls.gpu_class AS gpu_class, h.tenant_id AS tenant_id, h.confidence AS confidence,
               sum(h.joules) AS joules
        FROM (SELECT u.gpu_uuid AS gpu_uuid, c.tenant_id AS tenant_id, c.confidence AS confidence,
                     sum(c.capacity_fraction * u.span_ms
                         * if(startsWith(u.device_id, 'MIG-'), p.w, coalesce(u.power_w, 0))) / 1000 AS joules
              FROM (SELECT gpu_uuid, device_id, observed_at_ms, span_ms, power_w, capacity_fact_id
                    FROM {db}.utilization_facts FINAL WHERE {samples}) AS u
              INNER JOIN (SELECT fact_id, tenant_id, confidence, capacity_fraction FROM {db}.capacity_facts FINAL
                          WHERE {allocated_where(chunked, HELD)}) AS c ON c.fact_id = u.capacity_fact_id
              LEFT JOIN parent AS p ON p.gpu_uuid = u.gpu_uuid AND p.observed_at_ms = u.observed_at_ms
              GROUP BY gpu_uuid, tenant_id, confidence) AS h
        INNER JOIN ({_classes(db)}) AS cls ON cls.gpu_uuid = h.gpu_uuid
        GROUP BY gpu_class, tenant_id, confidence"""


def energy_sql(db: str) -> str:
    """Rows (gpu_class, tenant_id, confidence, joules) in ``[%(f)s, %(t)s)`` in one query: one
    row per class with tenant '' (every GPU's energy), then each tenant's part."""
    return f"{energy_totals_sql(db)}\n        UNION ALL\n        {energy_tenants_sql(db)}"


def read_energy_rows(reader: QueryPort, from_ms: int, to_ms: int, chunk_facts: int = CHUNK_FACTS) -> list[tuple]:
    """``energy_sql``'s rows, the tenants' parts read chunk by chunk and added up."""
    db, w = reader.db, {"f": from_ms, "t": to_ms}
    buckets = [tuple(r) for r in reader.query(buckets_sql(db, HELD), w)[1]]
    parts = [reader.query(energy_tenants_sql(db, True), p)[1] for p in chunks(buckets, from_ms, to_ms, chunk_facts)]
    return [tuple(r) for r in reader.query(energy_totals_sql(db), w)[1]] + summed(parts, 3)
