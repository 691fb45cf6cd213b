"""Scheduler pressure, SQL as tested values: GPU pods' waits (demand facts, domain/demand.py).

A wait is ``[created, running)`` (outcome ``scheduled``) or ``[created, ended)`` (``ended
without running``); ``scheduled_ms`` splits it into the scheduling delay (created -> bound to
a node) and the startup delay (bound -> running: image pull, init containers, container
start). A pod's GPU class is its node's in the inventory (empty while it was never bound); a
MIG pod also names its profile. A wait still open is a ``pending`` fact until its wait's fact
replaces it (``open_waits_sql`` pairs them). Windows are half-open ``[%(f)s, %(t)s)`` in ms; a wait
belongs to the window its end falls in. Percentiles are exact, interpolated between the two
nearest waits (``quantilesExactInclusive``: R's type 7, numpy's default, Python's
``statistics.quantiles(method="inclusive")``). Grafana panels on the scheduler dashboard run
the same SQL over its time range (deploy/grafana/dashboards/scheduler-capacity.json); where a
panel's SQL is ``as_panel`` of a function here (``PANELS``), the dashboard test holds it to
exactly that.
"""

from __future__ import annotations

import textwrap

from gpuledger.domain.demand import PENDING
from gpuledger.sinks.preemption_sql import reclaimed_by_tenant_sql, reclaimed_pods_sql
from gpuledger.sinks.showback_sql import WAIT_OUTCOMES

__all__ = ["DASHBOARD_FILTER", "PANELS", "QUANTILES", "TENANT_FILTER", "as_panel", "delay_percentiles_sql",
           "idle_workloads_sql", "node_class_sql", "node_pressure_sql", "open_waits_sql", "pending_by_age_sql",
           "waits_sql"]

QUANTILES = (0.5, 0.9, 0.99)
_Q = ", ".join(map(str, QUANTILES))


# The scheduler dashboard's tenant and GPU class variables, as a condition on the capacity
# facts: All (or nothing chosen) drops each (Grafana's $__conditionalAll).
DASHBOARD_FILTER = ("$__conditionalAll(tenant_id IN (${tenant:singlequote}), $tenant) "
                    "AND $__conditionalAll(gpu_class IN (${gpu_class:singlequote}), $gpu_class)")


def as_panel(sql: str) -> str:
    """A query here as a dashboard panel runs it: the window is the dashboard's time range
    (``$__from``, ``$__to``: epoch ms) and the step its interval."""
    first, _, rest = sql.partition("\n")
    return "\n".join([first, textwrap.dedent(rest)]).replace("%(f)s", "$__from").replace("%(t)s", "$__to").replace(
        "%(step)s", "($__interval_s * 1000)").strip()


def node_class_sql(db: str) -> str:
    """Each node's GPU class in the inventory (its first, should one node hold two)."""
    return f"""SELECT cluster_id, node, min(gpu_class) AS gpu_class FROM {db}.inventory_gpus FINAL
        GROUP BY cluster_id, node"""


def waits_sql(db: str) -> str:
    """Every wait that ended in the window, one row per pod and profile: who, where, the asked
    capacity, and its three instants (bound and running NULL when they did not happen)."""
    return f"""SELECT d.tenant_id AS tenant_id, d.namespace AS namespace, d.pod_name AS pod_name, d.pod_uid AS pod_uid,
            d.node AS node, n.gpu_class AS gpu_class, d.profile AS profile, d.instances AS instances,
            d.priority_class AS priority_class, d.priority AS priority, d.outcome AS outcome,
            d.waited_from_ms AS created_ms, d.scheduled_ms AS scheduled_ms, d.running_ms AS running_ms,
            d.waited_to_ms AS waited_to_ms
        FROM {db}.demand_facts AS d FINAL
        LEFT JOIN ({node_class_sql(db)}) AS n ON n.cluster_id = d.cluster_id AND n.node = d.node
        WHERE d.outcome IN ({WAIT_OUTCOMES}) AND d.waited_to_ms >= %(f)s AND d.waited_to_ms < %(t)s
        ORDER BY tenant_id, created_ms, pod_uid, profile"""


def delay_percentiles_sql(db: str) -> str:
    """Per tenant, GPU class, profile and priority class: waits, those never bound, and the
    percentiles (``QUANTILES``) of scheduling delay, startup delay and whole pending time in
    seconds (a delay that did not happen is left out of its percentiles)."""
    return f"""SELECT tenant_id, gpu_class, profile, priority_class, count() AS waits,
            countIf(scheduled_ms IS NULL) AS never_bound,
            quantilesExactInclusive({_Q})((scheduled_ms - created_ms) / 1000) AS scheduling_delay_s,
            quantilesExactInclusive({_Q})((running_ms - scheduled_ms) / 1000) AS startup_delay_s,
            quantilesExactInclusive({_Q})((waited_to_ms - created_ms) / 1000) AS pending_s
        FROM ({waits_sql(db)})
        GROUP BY tenant_id, gpu_class, profile, priority_class
        ORDER BY tenant_id, gpu_class, profile, priority_class"""


def node_pressure_sql(db: str) -> str:
    """Nodes ranked by fragmentation and queue pressure over the window: GPU-hours free on the
    node, the part of them free while some GPU pod of the cluster waited to be bound (free
    capacity the waiting pods could not use: fragmentation, or constraints that kept them off;
    sampled every ``%(step)s`` ms), and the pods bound to it: their count, pending pod-hours in
    the window and 90th percentile startup delay."""
    return f"""SELECT f.node AS node, f.gpu_class AS gpu_class, round(f.free_gpu_h, 3) AS free_gpu_hours,
            round(f.stranded_gpu_h, 3) AS free_while_pods_waited_gpu_hours,
            q.pods_bound AS pods_bound, round(q.pending_pod_h, 3) AS pending_pod_hours,
            q.p90_startup_s AS p90_startup_delay_s
        FROM (SELECT cluster_id, node, any(gpu_class) AS gpu_class,
                     sum(capacity_fraction * (least(valid_to_ms, %(t)s) - greatest(valid_from_ms, %(f)s))) / 3600000
                       AS free_gpu_h,
                     sum(capacity_fraction * %(step)s * length(arrayFilter(x -> has(w.instants, x),
                         range(intDiv(greatest(valid_from_ms, %(f)s) + %(step)s - 1, %(step)s) * %(step)s,
                               least(valid_to_ms, %(t)s), %(step)s)))) / 3600000 AS stranded_gpu_h
              FROM {db}.capacity_facts AS c FINAL
              LEFT JOIN (SELECT cluster_id, groupUniqArrayArray(range(
                             intDiv(greatest(waited_from_ms, %(f)s) + %(step)s - 1, %(step)s) * %(step)s,
                             least(coalesce(scheduled_ms, waited_to_ms), %(t)s), %(step)s)) AS instants
                         FROM {db}.demand_facts FINAL
                         WHERE outcome IN ({WAIT_OUTCOMES}) AND waited_from_ms < %(t)s
                           AND coalesce(scheduled_ms, waited_to_ms) > %(f)s
                         GROUP BY cluster_id) AS w ON w.cluster_id = c.cluster_id
              WHERE c.kind = 'unallocated' AND c.node != '' AND c.valid_to_ms > %(f)s AND c.valid_from_ms < %(t)s
              GROUP BY cluster_id, node) AS f
        LEFT JOIN (SELECT cluster_id, node, uniqExact(pod_uid) AS pods_bound,
                          sum(least(waited_to_ms, %(t)s) - greatest(waited_from_ms, %(f)s)) / 3600000 AS pending_pod_h,
                          quantileExactInclusive(0.9)((running_ms - scheduled_ms) / 1000) AS p90_startup_s
                   FROM {db}.demand_facts FINAL
                   WHERE outcome IN ({WAIT_OUTCOMES}) AND node != '' AND waited_to_ms > %(f)s AND waited_from_ms < %(t)s
                   GROUP BY cluster_id, node) AS q ON q.cluster_id = f.cluster_id AND q.node = f.node
        ORDER BY free_while_pods_waited_gpu_hours DESC, pending_pod_hours DESC, node LIMIT 10"""


def idle_workloads_sql(db: str, where: str = "1") -> str:
    """Workloads (pods, VMs) ranked by idle GPU-hours in the window: GPU-hours held whose DCGM
    samples showed no SM activity (covered time x (1 - SM-active); a telemetry gap is neither
    idle nor active), with the owner (tenant, project, cost center), node and age (from its
    creation, the first of its waits; else its first held instant, to the window's end or its
    last held instant). ``where``: a further condition on the capacity facts."""
    return f"""SELECT tenant_id, project_id, cost_center, namespace, workload, kind, node, age_hours,
            allocated_gpu_hours, mean_sm_active, idle_gpu_hours FROM (
        SELECT c.tenant_id AS tenant_id, any(c.project_id) AS project_id, any(c.cost_center) AS cost_center,
            c.namespace AS namespace, c.pod_name AS workload, any(c.workload_kind) AS kind, any(c.node) AS node,
            round((least(max(c.valid_to_ms), %(t)s) - if(min(d.created_ms) > 0, min(d.created_ms),
                   min(c.valid_from_ms))) / 3600000, 2) AS age_hours,
            round(sum(c.gpu_ms) / 3600000, 3) AS allocated_gpu_hours,
            sum(c.fr * least(u.span, c.b - c.a)) AS covered_ms,
            sum(c.fr * u.act * if(u.span > 0, least(1, (c.b - c.a) / u.span), 0)) AS active_ms,
            round(active_ms / nullIf(covered_ms, 0), 3) AS mean_sm_active,
            round((covered_ms - active_ms) / 3600000, 3) AS idle_gpu_hours
        FROM (SELECT fact_id, tenant_id, project_id, cost_center, namespace, pod_name, pod_uid, workload_kind, node,
                     valid_from_ms, valid_to_ms, capacity_fraction AS fr, greatest(valid_from_ms, %(f)s) AS a,
                     least(valid_to_ms, %(t)s) AS b, fr * (b - a) AS gpu_ms
              FROM {db}.capacity_facts FINAL
              WHERE kind = 'allocated' AND tenant_id != '' AND {where} AND valid_to_ms > %(f)s
                AND valid_from_ms < %(t)s) AS c
        LEFT JOIN (SELECT capacity_fact_id, sum(span_ms) AS span, sum(span_ms * coalesce(sm_active_ratio, 0)) AS act
                   FROM {db}.utilization_facts FINAL
                   WHERE capacity_fact_id != '' AND observed_at_ms >= %(f)s AND observed_at_ms < %(t)s
                   GROUP BY capacity_fact_id) AS u ON u.capacity_fact_id = c.fact_id
        LEFT JOIN (SELECT pod_uid, min(waited_from_ms) AS created_ms FROM {db}.demand_facts FINAL
                   WHERE pod_uid != '' GROUP BY pod_uid) AS d ON d.pod_uid = c.pod_uid
        GROUP BY c.tenant_id, c.namespace, c.pod_name, c.pod_uid
        HAVING idle_gpu_hours > 0)
        ORDER BY idle_gpu_hours DESC, tenant_id, workload LIMIT 10"""


def open_waits_sql(db: str, where: str = "1") -> str:
    """Every GPU pod's wait per profile that overlaps the window, ended or still open:
    ``[created_ms, until_ms)``, to its running or end for a wait that ended; for one still open
    (a pending fact and no wait fact yet, domain/demand.py) to the pod's end if a fact says it
    ended, else to the end of its cluster's evidence (the newest capacity fact's end), with
    ``still_pending``. ``where``: a further condition on the demand facts (``tenant_id``)."""
    return f"""SELECT w.cluster_id AS cluster_id, w.tenant_id AS tenant_id, w.pod_uid AS pod_uid, w.profile AS profile,
            w.created_ms AS created_ms, w.ended = 0 AS still_pending,
            if(w.ended = 1, w.wait_end_ms, if(e.end_ms > 0, e.end_ms, x.evidence_end_ms)) AS until_ms
        FROM (SELECT cluster_id, tenant_id, pod_uid, profile, min(waited_from_ms) AS created_ms,
                     countIf(outcome IN ({WAIT_OUTCOMES})) > 0 AS ended,
                     maxIf(waited_to_ms, outcome IN ({WAIT_OUTCOMES})) AS wait_end_ms
              FROM {db}.demand_facts FINAL
              WHERE outcome IN ({WAIT_OUTCOMES}, '{PENDING}') AND {where}
              GROUP BY cluster_id, tenant_id, pod_uid, profile) AS w
        LEFT JOIN (SELECT pod_uid, max(waited_to_ms) AS end_ms FROM {db}.demand_facts FINAL
                   WHERE outcome NOT IN ({WAIT_OUTCOMES}, '{PENDING}') GROUP BY pod_uid) AS e ON e.pod_uid = w.pod_uid
        LEFT JOIN (SELECT cluster_id, max(valid_to_ms) AS evidence_end_ms FROM {db}.capacity_facts
                   GROUP BY cluster_id) AS x ON x.cluster_id = w.cluster_id
        WHERE created_ms < %(t)s AND until_ms > %(f)s
        ORDER BY created_ms, pod_uid, profile"""


def pending_by_age_sql(db: str, where: str = "1") -> str:
    """GPU pods pending at each ``%(step)s`` of the window (``open_waits_sql``: waits that ended
    and waits still open), by how long they had been pending then."""
    return f"""SELECT toDateTime(intDiv(bucket_ms, 1000)) AS time,
          multiIf(bucket_ms - created_ms < 60000, 'under 1 min', bucket_ms - created_ms < 600000, '1-10 min',
                  bucket_ms - created_ms < 3600000, '10-60 min', 'over 1 h') AS age,
          uniqExact(pod_uid) AS pending_pods
        FROM ({open_waits_sql(db, where)})
        ARRAY JOIN range(intDiv(greatest(created_ms, %(f)s) + %(step)s - 1, %(step)s) * %(step)s,
                         least(until_ms, %(t)s), %(step)s) AS bucket_ms
        GROUP BY time, age
        ORDER BY time, age"""


# The tenant variable alone, for queries over the demand facts (they carry no GPU class).
TENANT_FILTER = "$__conditionalAll(tenant_id IN (${tenant:singlequote}), $tenant)"

# Scheduler dashboard panel title -> the function whose SQL it runs and the filter it runs with.
PANELS = {"Top idle workloads with owner and age": (idle_workloads_sql, DASHBOARD_FILTER),
          "Preemption and reclaim events": (reclaimed_pods_sql, DASHBOARD_FILTER),
          "Preemption history by tenant": (reclaimed_by_tenant_sql, DASHBOARD_FILTER),
          "Pending GPU pods by age": (pending_by_age_sql, TENANT_FILTER)}
