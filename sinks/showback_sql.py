"""Showback queries (SQL as tested values). Windows are half-open ``[from_ms, to_ms)``;
every interval is clipped to the window; facts are read FINAL (deduplicated)."""

from __future__ import annotations

from gpuledger.domain.cost import card_windows
from gpuledger.domain.rows import parsed
from gpuledger.domain.suspense import BILL_CONFIDENCE
from gpuledger.sinks.coverage_sql import IN_WINDOW, read_coverage_rows
from gpuledger.sinks.energy_sql import read_energy_rows
from gpuledger.sinks.query import QueryPort
from gpuledger.sinks.reference_sql import history_sql

__all__ = ["ClusterScopeError", "ShowbackRows", "read_showback_rows", "unattributed_reasons_sql"]
PRICING_KINDS = ("ratecards", "quotas", "credits", "endpoints", "suspense")  # reference kinds that price

CLIPPED_GPU_MS = "capacity_fraction * (least(valid_to_ms, %(t)s) - greatest(valid_from_ms, %(f)s))"
WAIT_OUTCOMES = "'scheduled', 'ended without running'"  # demand facts that are waits (domain/demand.py)


def evidence_end_sql(db: str) -> str:
    return f"SELECT max(valid_to_ms) FROM {db}.capacity_facts"


def evidence_short_sql(db: str) -> str:
    """Inventory GPUs whose evidence does not reach the end of the window or of their
    inventory validity, whichever is first: (GPU, node, needed until, reached)."""
    return f"""SELECT i.gpu_uuid, i.node, i.need_ms, c.reach_ms
        FROM (SELECT gpu_uuid, any(node) AS node, least(max(coalesce(valid_to_ms, %(t)s)), %(t)s) AS need_ms
              FROM {db}.inventory_gpus FINAL
              WHERE valid_from_ms < %(t)s AND coalesce(valid_to_ms, %(t)s) > %(f)s GROUP BY gpu_uuid) AS i
        LEFT JOIN (SELECT gpu_uuid, max(valid_to_ms) AS reach_ms FROM {db}.capacity_facts
                   WHERE kind != 'outside_inventory' GROUP BY gpu_uuid) AS c ON c.gpu_uuid = i.gpu_uuid
        WHERE c.reach_ms < i.need_ms ORDER BY c.reach_ms, i.gpu_uuid"""


def outside_inventory_sql(db: str) -> str:
    """Evidence of GPUs the inventory does not approve at that time, per GPU."""
    return f"""SELECT gpu_uuid, node, sum({CLIPPED_GPU_MS}) / 3600000 FROM {db}.capacity_facts FINAL
        WHERE kind = 'outside_inventory' AND {IN_WINDOW} GROUP BY gpu_uuid, node ORDER BY gpu_uuid, node"""


def tenant_capacity_sql(db: str) -> str:
    return f"""SELECT tenant_id, mode, confidence, sum({CLIPPED_GPU_MS}) / 3600000 AS gpu_hours
        FROM {db}.capacity_facts FINAL
        WHERE kind = 'allocated' AND tenant_id != '' AND {IN_WINDOW}
        GROUP BY tenant_id, mode, confidence ORDER BY tenant_id, mode, confidence"""


def tenant_profile_sql(db: str) -> str:
    """MIG-profile-hours: instance-hours per profile (not weighted)."""
    return f"""SELECT tenant_id, profile, sum(least(valid_to_ms, %(t)s) - greatest(valid_from_ms, %(f)s)) / 3600000
        FROM {db}.capacity_facts FINAL
        WHERE kind = 'allocated' AND mode = 'mig' AND tenant_id != '' AND {IN_WINDOW}
        GROUP BY tenant_id, profile ORDER BY tenant_id, profile"""


def platform_capacity_sql(db: str) -> str:
    return f"""SELECT kind, confidence = 'unattributed' AS unattributed, sum({CLIPPED_GPU_MS}) / 3600000 AS gpu_hours
        FROM {db}.capacity_facts FINAL WHERE {IN_WINDOW}
        GROUP BY kind, unattributed ORDER BY kind, unattributed"""


def physical_sql(db: str) -> str:
    return f"""SELECT sum(greatest(0, least(coalesce(valid_to_ms, %(t)s), %(t)s) - greatest(valid_from_ms, %(f)s)))
            / 3600000 FROM {db}.inventory_gpus FINAL"""


def unattributed_samples_sql(db: str) -> str:
    return f"""SELECT reason, count() FROM {db}.utilization_facts FINAL
        WHERE confidence = 'unattributed' AND observed_at_ms >= %(f)s AND observed_at_ms < %(t)s
        GROUP BY reason ORDER BY count() DESC"""


def endpoint_capacity_sql(db: str) -> str:
    return f"""SELECT endpoint_id, tenant_id, namespace, sum({CLIPPED_GPU_MS}) / 3600000 FROM {db}.capacity_facts FINAL
        WHERE kind = 'allocated' AND endpoint_id != '' AND tenant_id != '' AND {IN_WINDOW}
        GROUP BY endpoint_id, tenant_id, namespace ORDER BY endpoint_id, tenant_id, namespace"""


_REQUESTS_IN_WINDOW = "observed_at_ms >= %(f)s AND observed_at_ms < %(t)s"


def endpoint_usage_sql(db: str) -> str:
    return f"""SELECT endpoint_id, tenant_id, count(), countIf(outcome = 'success'),
            sumIf(input_tokens, outcome = 'success'), sumIf(output_tokens, outcome = 'success')
        FROM {db}.request_facts FINAL WHERE {_REQUESTS_IN_WINDOW}
        GROUP BY endpoint_id, tenant_id ORDER BY endpoint_id, tenant_id"""


def productive_work_sql(db: str) -> str:
    """Requests, tokens and latency quantiles (p50, p95, p99) per tenant, endpoint and model."""
    return f"""SELECT tenant_id, endpoint_id, model, count(), countIf(outcome = 'success'),
            sum(input_tokens), sum(output_tokens),
            quantilesExact(0.5, 0.95, 0.99)(queue_s), quantilesExact(0.5, 0.95, 0.99)(ttft_s),
            quantilesExact(0.5, 0.95, 0.99)(e2e_s)
        FROM {db}.request_facts FINAL WHERE {_REQUESTS_IN_WINDOW}
        GROUP BY tenant_id, endpoint_id, model ORDER BY tenant_id, endpoint_id, model"""


def fragmentation_sql(db: str) -> str:
    """Free MIG capacity per GPU class: idle instances by profile, and capacity in no instance."""
    return f"""SELECT gpu_class, profile, sum(least(valid_to_ms, %(t)s) - greatest(valid_from_ms, %(f)s)) / 3600000,
            sum({CLIPPED_GPU_MS}) / 3600000
        FROM {db}.capacity_facts FINAL WHERE mode = 'mig' AND kind = 'unallocated' AND {IN_WINDOW}
        GROUP BY gpu_class, profile ORDER BY gpu_class, profile"""


def unhostable_sql(db: str) -> str:
    """Free MIG capacity that could not host a waiting pod's profile: for each MIG wait during
    which no instance of that profile was free in a GPU class, the class's free GPU-equivalent
    hours meanwhile (other profiles and capacity in no instance)."""
    return f"""SELECT gpu_class, profile, count(), sum(waited_h), sum(free_other_h) FROM (
            SELECT d.fact_id, d.profile AS profile, c.gpu_class AS gpu_class, any(d.waited_h) AS waited_h,
                sumIf(least(c.valid_to_ms, d.b) - greatest(c.valid_from_ms, d.a), c.profile = d.profile) AS free_same,
                sumIf((least(c.valid_to_ms, d.b) - greatest(c.valid_from_ms, d.a)) * c.capacity_fraction,
                      c.profile != d.profile) / 3600000 AS free_other_h
            FROM (SELECT fact_id, profile, greatest(waited_from_ms, %(f)s) AS a, least(waited_to_ms, %(t)s) AS b,
                         (b - a) / 3600000 AS waited_h
                  FROM {db}.demand_facts FINAL
                  WHERE outcome IN ({WAIT_OUTCOMES}) AND profile != ''
                    AND waited_to_ms > %(f)s AND waited_from_ms < %(t)s) AS d
            CROSS JOIN (SELECT gpu_class, profile, capacity_fraction, valid_from_ms, valid_to_ms
                        FROM {db}.capacity_facts FINAL
                        WHERE mode = 'mig' AND kind = 'unallocated' AND {IN_WINDOW}) AS c
            WHERE c.valid_to_ms > d.a AND c.valid_from_ms < d.b
            GROUP BY d.fact_id, d.profile, c.gpu_class)
        WHERE free_same = 0 GROUP BY gpu_class, profile ORDER BY gpu_class, profile"""


def completed_jobs_sql(db: str) -> str:
    """GPU pods that finished (phase Succeeded) in the window, per tenant (demand facts, domain/demand.py)."""
    return f"""SELECT tenant_id, count() FROM {db}.demand_facts FINAL
        WHERE outcome = 'completed' AND waited_to_ms > %(f)s AND waited_to_ms <= %(t)s
        GROUP BY tenant_id ORDER BY tenant_id"""


def disrupted_pods_sql(db: str) -> str:
    """Pods the cluster ended by preemption or eviction (demand facts, domain/demand.py) whose
    lives overlap the window: pod UID -> outcome."""
    return f"""SELECT pod_uid, any(outcome) FROM {db}.demand_facts FINAL
        WHERE outcome IN ('preempted', 'evicted') AND waited_to_ms > %(f)s AND waited_from_ms < %(t)s
        GROUP BY pod_uid ORDER BY pod_uid"""


def endpoint_intervals_sql(db: str) -> str:
    return f"""SELECT endpoint_id, tenant_id, gpu_class, valid_from_ms, valid_to_ms, capacity_fraction, namespace
        FROM {db}.capacity_facts FINAL
        WHERE kind = 'allocated' AND endpoint_id != '' AND tenant_id != '' AND {IN_WINDOW}"""


def hourly_tokens_sql(db: str) -> str:
    """Successful requests' tokens per tenant, hour (rate cards change on hour edges) and
    endpoint (its service tier may have rates of its own)."""
    return f"""SELECT tenant_id, intDiv(observed_at_ms, 3600000) * 3600000 AS hour_ms,
            sumIf(input_tokens, outcome = 'success'), sumIf(output_tokens, outcome = 'success'), endpoint_id
        FROM {db}.request_facts FINAL WHERE {_REQUESTS_IN_WINDOW}
        GROUP BY tenant_id, hour_ms, endpoint_id ORDER BY tenant_id, hour_ms, endpoint_id"""


def hourly_endpoint_work_sql(db: str) -> str:
    """Successful requests and output tokens per tenant, hour and endpoint (what the endpoint's
    capacity class that hour is told apart by: domain/productive_capacity.py)."""
    return f"""SELECT tenant_id, intDiv(observed_at_ms, 3600000) * 3600000 AS hour_ms, endpoint_id,
            countIf(outcome = 'success'), sumIf(output_tokens, outcome = 'success')
        FROM {db}.request_facts FINAL WHERE {_REQUESTS_IN_WINDOW}
        GROUP BY tenant_id, hour_ms, endpoint_id ORDER BY tenant_id, hour_ms, endpoint_id"""


def hierarchy_sql(db: str) -> str:
    """Tenant -> project -> cost centre as the evidence of the window names them."""
    return f"""SELECT DISTINCT tenant_id, project_id, cost_center FROM {db}.capacity_facts FINAL
        WHERE kind = 'allocated' AND tenant_id != '' AND {IN_WINDOW} ORDER BY tenant_id, project_id, cost_center"""


def class_buckets_sql(db: str) -> str:
    """GPU-hours per class nobody is charged for, by why: allocated without a tenant,
    unallocated (MIG capacity in no instance is fragmentation), unavailable, over-allocated."""
    return f"""SELECT gpu_class, multiIf(kind = 'allocated', 'unattributed',
                kind = 'unallocated' AND mode = 'mig' AND profile = '', 'fragmentation', kind) AS bucket,
            sum({CLIPPED_GPU_MS}) / 3600000
        FROM {db}.capacity_facts FINAL
        WHERE {IN_WINDOW} AND NOT (kind = 'allocated' AND tenant_id != '') AND kind != 'outside_inventory'
        GROUP BY gpu_class, bucket ORDER BY gpu_class, bucket"""


# who held unattributed capacity: a pod's namespace (pods come and go; the namespace is what
# a tenant is found for), or the VM
HOLDER = ("if(workload_kind = 'vm', concat('vm/', if(pod_name != '', pod_name, pod_uid)), "
          "concat('namespace/', namespace))")


def class_unattributed_sql(db: str) -> str:
    """The ``unattributed`` bucket of ``class_buckets_sql`` by SKU and holder (suspense lines:
    domain/pricing.py)."""
    return f"""SELECT gpu_class, if(profile = '', gpu_class, concat(gpu_class, '/', profile)) AS sku,
            {HOLDER} AS holder, sum({CLIPPED_GPU_MS}) / 3600000
        FROM {db}.capacity_facts FINAL
        WHERE {IN_WINDOW} AND kind = 'allocated' AND tenant_id = ''
        GROUP BY gpu_class, sku, holder ORDER BY gpu_class, sku, holder"""


def unattributed_reasons_sql(db: str) -> str:
    """Unattributed capacity by holder, SKU and the reason the evidence gave (what ``suspense
    list`` shows an investigator)."""
    return f"""SELECT {HOLDER} AS holder, if(profile = '', gpu_class, concat(gpu_class, '/', profile)) AS sku, reason,
            sum({CLIPPED_GPU_MS}) / 3600000
        FROM {db}.capacity_facts FINAL
        WHERE {IN_WINDOW} AND kind = 'allocated' AND tenant_id = ''
        GROUP BY holder, sku, reason ORDER BY holder, sku, reason"""


def class_physical_sql(db: str) -> str:
    """GPU-milliseconds per class in the inventory (integers: exact)."""
    return f"""SELECT gpu_class,
            sum(greatest(0, least(coalesce(valid_to_ms, %(t)s), %(t)s) - greatest(valid_from_ms, %(f)s)))
        FROM {db}.inventory_gpus FINAL GROUP BY gpu_class ORDER BY gpu_class"""


def evidence_clusters_sql(db: str) -> str:
    """The clusters whose evidence (capacity facts, inventory) falls in the window."""
    return f"""SELECT cluster_id FROM {db}.capacity_facts FINAL WHERE {IN_WINDOW}
        UNION DISTINCT SELECT cluster_id FROM {db}.inventory_gpus FINAL
        WHERE valid_from_ms < %(t)s AND coalesce(valid_to_ms, %(t)s) > %(f)s"""


class ClusterScopeError(ValueError):
    """The window holds evidence of more than one cluster: each is priced by its own documents."""


def _documents(reader: QueryPort, kind: str, clusters: list[str]) -> list[str]:
    """Every document of a kind published for the clusters, the latest publication first."""
    if not clusters:
        return []
    return [r[3] for r in reader.query(history_sql(reader.db), {"kind": kind, "clusters": clusters})[1]]


class ShowbackRows(dict):
    """Raw query results keyed by query name, plus the window actually used."""


def read_showback_rows(reader: QueryPort, from_ms: int, to_ms: int,
                       bill_confidence: tuple[str, ...] = BILL_CONFIDENCE) -> ShowbackRows:
    """What the showback and the ledger price; ``bill_confidence``: the confidence classes that
    bill tenants (the rest is suspense: domain/suspense.py)."""
    db = reader.db
    _, end = reader.query(evidence_end_sql(db))
    evidence_end = end[0][0] if end and end[0][0] is not None else from_ms
    short = reader.query(evidence_short_sql(db), {"f": from_ms, "t": to_ms})[1]
    # Complete evidence (every inventory GPU covered to the window's end or its own) shows the
    # whole window; otherwise the showback is provisional up to the latest evidence.
    physical = reader.query(physical_sql(db), {"f": from_ms, "t": to_ms})[1]
    complete = not short and bool(physical and physical[0][0])
    window_to = to_ms if complete else max(from_ms, min(to_ms, int(evidence_end)))
    p = {"f": from_ms, "t": window_to}
    rows = ShowbackRows(from_ms=from_ms, to_ms=to_ms, as_of_ms=window_to, bill_confidence=bill_confidence)
    rows["evidence_short"] = short
    rows["outside_inventory"] = reader.query(outside_inventory_sql(db), p)[1]
    rows["tenant_capacity"] = reader.query(tenant_capacity_sql(db), p)[1]
    rows.update(read_coverage_rows(reader, from_ms, window_to))  # tenant_utilization, ..._daily_..., held
    rows["tenant_profiles"] = reader.query(tenant_profile_sql(db), p)[1]
    rows["platform_capacity"] = reader.query(platform_capacity_sql(db), p)[1]
    rows["physical"] = reader.query(physical_sql(db), p)[1]
    rows["unattributed_samples"] = reader.query(unattributed_samples_sql(db), p)[1]
    rows["endpoint_capacity"] = reader.query(endpoint_capacity_sql(db), p)[1]
    rows["endpoint_usage"] = reader.query(endpoint_usage_sql(db), p)[1]
    rows["productive_work"] = reader.query(productive_work_sql(db), p)[1]
    # Rate cards, quotas, credits and endpoint declarations apply to the cluster they were
    # published for: only the documents of the cluster whose evidence this is are read, every
    # one published (the entries in force are chosen from them: domain/reference_history.py).
    clusters = sorted({r[0] for r in reader.query(evidence_clusters_sql(db), {"f": from_ms, "t": to_ms})[1]})
    if len(clusters) > 1:
        raise ClusterScopeError(f"the store holds evidence of {len(clusters)} clusters in this window "
                                f"({', '.join(clusters[:5])}): each is priced by its own rate cards, so keep one "
                                "cluster per store (GPULEDGER_TOPIC_PREFIX and the ClickHouse database per cluster)")
    rows["clusters"] = clusters
    for kind in PRICING_KINDS:
        rows[kind] = _documents(reader, kind, clusters)
    cards = parsed(rows, "ratecards")
    rows["windows"] = []
    for card, a, b in card_windows(cards, from_ms, window_to):
        w = {"f": a, "t": b}
        rows["windows"].append({"version": card.version if card else None, "from_ms": a, "to_ms": b,
                                "physical": reader.query(class_physical_sql(db), w)[1],
                                "buckets": reader.query(class_buckets_sql(db), w)[1],
                                "unattributed": reader.query(class_unattributed_sql(db), w)[1],
                                # only a card that prices energy reads it (every sample of the window)
                                "energy": read_energy_rows(reader, a, b) if card and card.per_kwh is not None
                                else []})
    rows["disrupted_pods"] = reader.query(disrupted_pods_sql(db), p)[1]
    rows["completed_jobs"] = reader.query(completed_jobs_sql(db), p)[1]
    rows["endpoint_intervals"] = reader.query(endpoint_intervals_sql(db), p)[1]
    rows["hourly_tokens"] = reader.query(hourly_tokens_sql(db), p)[1]
    rows["hourly_endpoint_work"] = reader.query(hourly_endpoint_work_sql(db), p)[1]
    rows["fragmentation"] = reader.query(fragmentation_sql(db), p)[1]
    rows["unhostable"] = reader.query(unhostable_sql(db), p)[1]
    rows["hierarchy"] = reader.query(hierarchy_sql(db), p)[1]
    return rows


def inventory_in_force_sql(db: str) -> list[str]:
    """The approved inventory the window ``[%(f)s, %(t)s)`` was measured against (its GPU entries
    and unavailability windows in it), in a fixed order (what the closed document's inventory
    hash is taken over)."""
    return [f"""SELECT gpu_uuid, node, model, gpu_class, mode, valid_from_ms, valid_to_ms
                FROM {db}.inventory_gpus FINAL WHERE cluster_id IN %(clusters)s
                  AND valid_from_ms < %(t)s AND coalesce(valid_to_ms, %(t)s) > %(f)s
                ORDER BY gpu_uuid, valid_from_ms""",
            f"""SELECT gpu_uuid, from_ms, to_ms, reason FROM {db}.inventory_unavailable FINAL
                WHERE cluster_id IN %(clusters)s AND from_ms < %(t)s AND to_ms > %(f)s
                ORDER BY gpu_uuid, from_ms, to_ms, reason"""]
