"""Telemetry coverage of allocated capacity (SQL as tested values), read a chunk of capacity
facts at a time.

Per allocated capacity fact the window's covered time is its samples' span capped at the
fact's duration, and its active time the SM-active-weighted span scaled down by the same cap
(gaps add nothing: never idle). Three readings take it: per tenant, per tenant and UTC day, and
per held interval (the pricing's quota sweep, with the share its telemetry covered).

A month of a fleet holds tens of millions of facts and samples: grouping every sample by its
fact in one query holds a hash entry per fact, and the held intervals one row per fact. So the
window's allocated facts are cut into chunks of about ``CHUNK_FACTS`` by ``valid_from_ms``
(whole ``BUCKET_MS`` buckets, in order), and each reading runs per chunk, over the samples that
can belong to it: those of its facts, observed from ``MAX_STALE_CEILING_MS`` before its first
start (a sample part over a fact keeps the sample's time, at most one stale ceiling before the
part) to its last end. Per tenant and per day the chunks' sums are added; the held intervals
of one device and holding that touch are joined in the store (window functions) and across
chunks (domain/held.py), so a window reads rows bounded by its holdings, not its facts.

Every interval is half-open; times are epoch ms; facts are read FINAL.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuledger.domain.cadence import MAX_STALE_CEILING_MS
from gpuledger.domain.held import join_touching
from gpuledger.sinks.query import QueryPort

__all__ = ["BUCKET_MS", "CHUNK_FACTS", "IN_WINDOW", "OBSERVED_IN_CHUNK", "allocated_where", "buckets_sql", "chunks",
           "held_intervals_sql", "read_coverage_rows", "samples_by_capacity_fact_sql", "samples_where", "summed",
           "tenant_daily_utilization_sql", "tenant_utilization_sql"]

CHUNK_FACTS = 200_000  # allocated facts a chunk holds (a bucket is never cut, so one may hold more)
BUCKET_MS = 600_000  # chunks are whole 10-minute buckets of valid_from_ms
IN_WINDOW = "valid_to_ms > %(f)s AND valid_from_ms < %(t)s"
ALLOCATED = f"kind = 'allocated' AND tenant_id != '' AND {IN_WINDOW}"
# valid_from (the sort key) bounds the parts read; valid_from_ms is the exact bound
IN_CHUNK = ("valid_from >= fromUnixTimestamp64Milli(toInt64(%(cf)s), 'UTC') "
            "AND valid_from < fromUnixTimestamp64Milli(toInt64(%(ct)s), 'UTC') "
            "AND valid_from_ms >= %(cf)s AND valid_from_ms < %(ct)s")
SAMPLES_IN_WINDOW = "capacity_fact_id != '' AND observed_at_ms >= %(f)s AND observed_at_ms < %(t)s"
# observed_at (the samples' sort key) bounds the parts a chunk reads
OBSERVED_IN_CHUNK = ("observed_at >= fromUnixTimestamp64Milli(toInt64(%(sf)s), 'UTC') "
                     "AND observed_at < fromUnixTimestamp64Milli(toInt64(%(st)s), 'UTC')")


def allocated_where(chunked: bool, facts: str = ALLOCATED) -> str:
    """The window's allocated facts of a tenant (``facts``; with ``chunked``, those starting in
    ``[%(cf)s, %(ct)s)``)."""
    return f"{facts} AND {IN_CHUNK}" if chunked else facts


def samples_where(db: str, chunked: bool, facts: str = ALLOCATED) -> str:
    """Samples over a capacity fact observed in the window (with ``chunked``, over the chunk's facts)."""
    if not chunked:
        return SAMPLES_IN_WINDOW
    # the fact ids pick the chunk's own samples among those its times bound
    return (f"""{SAMPLES_IN_WINDOW} AND {OBSERVED_IN_CHUNK}
              AND capacity_fact_id IN (SELECT fact_id FROM {db}.capacity_facts WHERE {allocated_where(True, facts)})""")


def samples_by_capacity_fact_sql(db: str, chunked: bool = False) -> str:
    """Per capacity fact: its samples' span (``span``, ms) and SM-active-weighted span (``act``)
    in the window ``[%(f)s, %(t)s)`` (with ``chunked``, of the chunk's facts only)."""
    return f"""SELECT capacity_fact_id, sum(span_ms) AS span, sum(span_ms * coalesce(sm_active_ratio, 0)) AS act
        FROM {db}.utilization_facts FINAL
        WHERE {samples_where(db, chunked)}
        GROUP BY capacity_fact_id"""


def _facts(db: str, columns: str, chunked: bool) -> str:
    return f"""(SELECT {columns}, greatest(valid_from_ms, %(f)s) AS a, least(valid_to_ms, %(t)s) AS b
              FROM {db}.capacity_facts FINAL WHERE {allocated_where(chunked)})"""


def tenant_utilization_sql(db: str, chunked: bool = False) -> str:
    """Per tenant: covered and active GPU-hours (capped per fact, see above)."""
    return f"""SELECT c.tenant_id AS tenant_id,
            sum(c.fr * least(u.span, c.b - c.a)) / 3600000 AS covered_gpu_hours,
            sum(c.fr * if(u.span > 0, u.act * least(1, (c.b - c.a) / u.span), 0)) / 3600000 AS active_gpu_hours
        FROM {_facts(db, "fact_id, tenant_id, capacity_fraction AS fr", chunked)} AS c
        LEFT JOIN ({samples_by_capacity_fact_sql(db, chunked)}) AS u ON u.capacity_fact_id = c.fact_id
        GROUP BY c.tenant_id ORDER BY c.tenant_id"""


def tenant_daily_utilization_sql(db: str, chunked: bool = False) -> str:
    """Per tenant and UTC day (``day_ms``): covered and active GPU-hours, the window's per
    fact (``tenant_utilization_sql``) divided by the span of the samples observed each day,
    so the days add up to the window: a fact's cap ``least(1, duration / span)`` scales each
    day's span and SM-active-weighted span alike."""
    return f"""SELECT c.tenant_id AS tenant_id, d.day_ms AS day_ms,
            sum(c.fr * d.span * least(1, (c.b - c.a) / u.span)) / 3600000 AS covered_gpu_hours,
            sum(c.fr * d.act * least(1, (c.b - c.a) / u.span)) / 3600000 AS active_gpu_hours
        FROM {_facts(db, "fact_id, tenant_id, capacity_fraction AS fr", chunked)} AS c
        INNER JOIN ({samples_by_capacity_fact_sql(db, chunked)}) AS u ON u.capacity_fact_id = c.fact_id
        INNER JOIN (SELECT capacity_fact_id, intDiv(observed_at_ms, 86400000) * 86400000 AS day_ms,
                           sum(span_ms) AS span, sum(span_ms * coalesce(sm_active_ratio, 0)) AS act
                    FROM {db}.utilization_facts FINAL
                    WHERE {samples_where(db, chunked)}
                    GROUP BY capacity_fact_id, day_ms) AS d ON d.capacity_fact_id = c.fact_id
        WHERE u.span > 0
        GROUP BY c.tenant_id, d.day_ms ORDER BY c.tenant_id, d.day_ms"""


HOLDING = "device_id, tenant_id, gpu_class, sku, capacity_fraction, confidence, pod_uid, covered_share"


def held_intervals_sql(db: str, chunked: bool = False) -> str:
    """Every allocated holding of a tenant with its SKU (class, class/MIG or vGPU profile),
    for the guaranteed/borrowed sweep against quotas; with its confidence, pod, the share of
    it (in the window) its telemetry covered, as ``tenant_utilization_sql`` counts coverage,
    and its device. Facts of one device and holding (every other field equal) that touch are
    one row (``domain/held.py``)."""
    per_fact = f"""SELECT c.device_id AS device_id, c.tenant_id AS tenant_id, c.gpu_class AS gpu_class,
            if(c.profile = '', c.gpu_class, concat(c.gpu_class, '/', c.profile)) AS sku,
            c.valid_from_ms AS valid_from_ms, c.valid_to_ms AS valid_to_ms, c.capacity_fraction AS capacity_fraction,
            c.confidence AS confidence, c.pod_uid AS pod_uid,
            if(c.b > c.a, least(coalesce(u.span, 0), c.b - c.a) / (c.b - c.a), 1.0) AS covered_share
        FROM {_facts(db, "fact_id, device_id, tenant_id, gpu_class, profile, valid_from_ms, valid_to_ms, "
                         "capacity_fraction, confidence, pod_uid", chunked)} AS c
        LEFT JOIN ({samples_by_capacity_fact_sql(db, chunked)}) AS u ON u.capacity_fact_id = c.fact_id"""
    starts = f"""SELECT *, if(valid_from_ms = lagInFrame(valid_to_ms, 1, -1) OVER (PARTITION BY {HOLDING}
                        ORDER BY valid_from_ms, valid_to_ms ROWS BETWEEN 1 PRECEDING AND CURRENT ROW), 0, 1) AS starts
        FROM ({per_fact})"""
    runs = f"""SELECT *, sum(starts) OVER (PARTITION BY {HOLDING} ORDER BY valid_from_ms, valid_to_ms
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run
        FROM ({starts})"""
    return f"""SELECT tenant_id, gpu_class, sku, min(valid_from_ms), max(valid_to_ms), capacity_fraction, confidence,
            pod_uid, covered_share, device_id
        FROM ({runs})
        GROUP BY {HOLDING}, run ORDER BY device_id, tenant_id, min(valid_from_ms)"""


def buckets_sql(db: str, facts: str = ALLOCATED) -> str:
    """The window's allocated facts (``facts``) per ``BUCKET_MS`` of ``valid_from_ms``: (bucket
    start, facts, latest ``valid_to_ms``)."""
    return f"""SELECT intDiv(valid_from_ms, {BUCKET_MS}) * {BUCKET_MS} AS bucket, count(), max(valid_to_ms)
        FROM {db}.capacity_facts WHERE {facts} GROUP BY bucket ORDER BY bucket"""


def chunks(buckets: list[tuple[int, int, int]], from_ms: int, to_ms: int,
           chunk_facts: int = CHUNK_FACTS) -> Iterator[dict]:
    """Query parameters per chunk of whole buckets holding about ``chunk_facts`` facts:
    the window (``f``, ``t``), the chunk's starts ``[cf, ct)`` and the observation times its
    samples can have ``[sf, st)``."""
    first, facts, last_end = None, 0, 0
    for i, (start, n, end) in enumerate(buckets):
        first, facts, last_end = start if first is None else first, facts + n, max(last_end, end)
        if i == len(buckets) - 1 or facts + buckets[i + 1][1] > chunk_facts:
            yield {"f": from_ms, "t": to_ms, "cf": first, "ct": start + BUCKET_MS,
                   "sf": max(from_ms, first - MAX_STALE_CEILING_MS), "st": min(to_ms, last_end)}
            first, facts, last_end = None, 0, 0


def summed(parts: list[list[tuple]], width: int) -> list[tuple]:
    """Rows of several chunks keyed by their first ``width`` fields, the rest added up, in key order."""
    out: dict[tuple, list[float]] = {}
    for rows in parts:
        for row in rows:
            acc = out.setdefault(tuple(row[:width]), [0.0] * (len(row) - width))
            for k, v in enumerate(row[width:]):
                acc[k] += v
    return [key + tuple(values) for key, values in sorted(out.items())]


def read_coverage_rows(reader: QueryPort, from_ms: int, to_ms: int,
                       chunk_facts: int = CHUNK_FACTS) -> dict[str, list[tuple]]:
    """``tenant_utilization`` (tenant, covered, active GPU-hours), ``tenant_daily_utilization``
    (tenant, day, covered, active) and ``held`` (tenant, class, SKU, from, to, GPU-equivalents,
    confidence, pod UID, covered share) of the window, read chunk by chunk."""
    db, util, daily, held = reader.db, [], [], []
    buckets = [tuple(r) for r in reader.query(buckets_sql(db), {"f": from_ms, "t": to_ms})[1]]
    for p in chunks(buckets, from_ms, to_ms, chunk_facts):
        util.append(reader.query(tenant_utilization_sql(db, True), p)[1])
        daily.append(reader.query(tenant_daily_utilization_sql(db, True), p)[1])
        held.extend(tuple(r) for r in reader.query(held_intervals_sql(db, True), p)[1])
    return {"tenant_utilization": summed(util, 1), "tenant_daily_utilization": summed(daily, 2),
            "held": [h[:-1] for h in join_touching(held)]}
