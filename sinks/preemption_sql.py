"""Capacity the cluster took back, in SQL as tested values: the GPU-hours held by pods it
preempted or evicted (demand facts, domain/demand.py), per pod and GPU class, and how many of
them were borrowed.

The borrowed part is the quota sweep of domain/preemption.py and domain/quota.py: every
interval a tenant held (capacity facts) goes through its class's sweep together, tagged with
its pod when the cluster ended that pod (``unit``; everything else is one untagged unit), and
at each instant the tenant's holding of a class up to its quota is guaranteed, shared by the
units in proportion to what each holds; the rest is borrowed. The quotas are those in force
(sinks/reference_sql.py ``entries_in_force_sql``: every ``quotas`` document published, the
latest publication of each entry winning), each within its own dates. Windows are half-open
``[%(f)s, %(t)s)`` in ms; a pod counts when its life overlaps the window, with what it held
inside it. ``where`` is a further condition on the capacity facts (``tenant_id``,
``gpu_class``): it keeps or drops a tenant's class whole, so the sweep is never cut. The
scheduler dashboard's "Preemption and reclaim" panels are these queries over its range
(sinks/scheduler_sql.py ``as_panel``).
"""

from __future__ import annotations

import textwrap

from gpuledger.sinks.reference_sql import entries_in_force_sql

__all__ = ["DISRUPTED", "reclaimed_by_tenant_sql", "reclaimed_pods_sql", "reclaimed_split_sql"]

DISRUPTED = "'preempted', 'evicted'"  # demand facts of pods the cluster ended (domain/demand.py)


def reclaimed_split_sql(db: str, where: str = "1") -> str:
    """Per tenant, GPU class and disrupted pod: ``gpu_hours`` held in the window,
    ``guaranteed_gpu_hours`` and ``borrowed_gpu_hours`` (unrounded)."""
    return f"""WITH toInt64(%(f)s) AS w_from_ms, toInt64(%(t)s) AS w_to_ms,
          entries AS (
            {textwrap.indent(entries_in_force_sql(db), "    ").lstrip()}),
          disrupted AS (
            SELECT pod_uid, any(outcome) AS ended_by FROM {db}.demand_facts FINAL
            WHERE outcome IN ({DISRUPTED}) AND waited_to_ms > w_from_ms AND waited_from_ms < w_to_ms
            GROUP BY pod_uid),
          held AS (
            SELECT c.tenant_id AS tenant_id, c.gpu_class AS gpu_class, if(d.ended_by = '', '', c.pod_uid) AS unit,
                   toInt64(greatest(c.valid_from_ms, w_from_ms)) AS a, toInt64(least(c.valid_to_ms, w_to_ms)) AS b,
                   c.capacity_fraction AS gpus
            FROM (SELECT tenant_id, gpu_class, pod_uid, valid_from_ms, valid_to_ms, capacity_fraction
                  FROM {db}.capacity_facts FINAL
                  WHERE kind = 'allocated' AND tenant_id != '' AND valid_to_ms > w_from_ms AND valid_from_ms < w_to_ms
                    AND {where}) AS c
            LEFT JOIN disrupted AS d ON d.pod_uid = c.pod_uid),
          quotas AS (
            SELECT JSONExtractString(q, 'tenant_id') AS tenant_id, JSONExtractString(q, 'gpu_class') AS gpu_class,
                   JSONExtractFloat(q, 'guaranteed_gpus') AS guaranteed_gpus,
                   toUnixTimestamp64Milli(parseDateTime64BestEffort(JSONExtractString(q, 'valid_from'), 3, 'UTC')) AS q_from_ms,
                   if(JSONExtractString(q, 'valid_to') = '', toInt64(9e18),
                      toUnixTimestamp64Milli(parseDateTime64BestEffort(JSONExtractString(q, 'valid_to'), 3, 'UTC'))) AS q_to_ms
            FROM (SELECT entry AS q FROM entries WHERE kind = 'quotas')),
          deltas AS (
            SELECT tenant_id, gpu_class, unit, t, sum(d) AS d
            FROM (SELECT tenant_id, gpu_class, unit, a AS t, gpus AS d FROM held
                  UNION ALL SELECT tenant_id, gpu_class, unit, b AS t, -gpus AS d FROM held)
            GROUP BY tenant_id, gpu_class, unit, t),
          cuts AS (
            SELECT DISTINCT tenant_id, gpu_class, t
            FROM (SELECT tenant_id, gpu_class, t FROM deltas
                  UNION ALL SELECT tenant_id, gpu_class, arrayJoin([q_from_ms, q_to_ms]) AS t FROM quotas
                  WHERE t > w_from_ms AND t < w_to_ms)),
          levels AS (
            SELECT c.tenant_id AS tenant_id, c.gpu_class AS gpu_class, p.unit AS unit, c.t AS t,
              sum(d.d) OVER (PARTITION BY c.tenant_id, c.gpu_class, p.unit ORDER BY c.t
                             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS level,
              sum(d.d) OVER (PARTITION BY c.tenant_id, c.gpu_class ORDER BY c.t
                             RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total,
              leadInFrame(c.t) OVER (PARTITION BY c.tenant_id, c.gpu_class, p.unit ORDER BY c.t
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS nxt
            FROM cuts AS c
            INNER JOIN (SELECT DISTINCT tenant_id, gpu_class, unit FROM held) AS p
              ON c.tenant_id = p.tenant_id AND c.gpu_class = p.gpu_class
            LEFT JOIN deltas AS d
              ON d.tenant_id = c.tenant_id AND d.gpu_class = c.gpu_class AND d.unit = p.unit AND d.t = c.t),
          quota_steps AS (
            SELECT tenant_id, gpu_class, arraySort(x -> x.1, groupArray((q_from_ms, q_to_ms, guaranteed_gpus))) AS steps
            FROM quotas GROUP BY tenant_id, gpu_class)
        SELECT tenant_id, gpu_class, unit AS pod_uid, sum(held_gpu_hours) AS gpu_hours,
          sum(guaranteed) AS guaranteed_gpu_hours, sum(borrowed) AS borrowed_gpu_hours
        FROM (SELECT l.tenant_id AS tenant_id, l.gpu_class AS gpu_class, l.unit AS unit,
                arrayFilter(x -> x.1 <= l.t AND l.t < x.2, q.steps) AS current_quota,
                if(empty(current_quota), 0, current_quota[-1].3) AS quota_gpus,
                round(l.level, 9) AS lv, round(l.total, 9) AS tot,
                lv * (l.nxt - l.t) / 3600000 AS held_gpu_hours,
                lv * least(tot, quota_gpus) / tot * (l.nxt - l.t) / 3600000 AS guaranteed,
                lv * (tot - least(tot, quota_gpus)) / tot * (l.nxt - l.t) / 3600000 AS borrowed
              FROM levels AS l
              LEFT JOIN quota_steps AS q ON q.tenant_id = l.tenant_id AND q.gpu_class = l.gpu_class
              WHERE l.unit != '' AND l.nxt > l.t AND round(l.total, 9) > 0)
        GROUP BY tenant_id, gpu_class, pod_uid"""


def reclaimed_pods_sql(db: str, where: str = "1") -> str:
    """Each disrupted pod (newest end first) that held capacity in the window, per GPU class:
    when and how it ended, what it asked for, how long it lived, the GPU-hours it held in the
    window and how many of them were borrowed."""
    return f"""SELECT fromUnixTimestamp64Milli(d.waited_to_ms, 'UTC') AS ended, d.tenant_id AS tenant_id,
          d.namespace AS namespace, d.pod_name AS pod_name, d.outcome AS outcome, s.gpu_class AS gpu_class,
          if(d.profile = '', concat(toString(d.instances), ' GPU'), concat(toString(d.instances), ' x ', d.profile)) AS asked,
          round((d.waited_to_ms - d.waited_from_ms) / 3600000, 3) AS hours_alive,
          round(s.gpu_hours, 3) AS gpu_hours_held, round(s.borrowed_gpu_hours, 3) AS borrowed_gpu_hours
        FROM {db}.demand_facts AS d FINAL
        INNER JOIN ({reclaimed_split_sql(db, where)}) AS s ON s.pod_uid = d.pod_uid
        WHERE d.outcome IN ({DISRUPTED}) AND d.waited_to_ms > %(f)s AND d.waited_from_ms < %(t)s
        ORDER BY ended DESC, tenant_id, pod_name, gpu_class"""


def reclaimed_by_tenant_sql(db: str, where: str = "1") -> str:
    """Per tenant, GPU class and outcome: the pods the cluster ended that held capacity in the
    window, the GPU-hours they held and how many of them were borrowed (the showback's
    ``reclaimed`` block, ``by_class``)."""
    return f"""SELECT s.tenant_id AS tenant_id, s.gpu_class AS gpu_class, d.ended_by AS outcome,
          uniqExact(s.pod_uid) AS pods, round(sum(s.gpu_hours), 3) AS gpu_hours_held,
          round(sum(s.borrowed_gpu_hours), 3) AS borrowed_gpu_hours
        FROM ({reclaimed_split_sql(db, where)}) AS s
        INNER JOIN (SELECT pod_uid, any(outcome) AS ended_by FROM {db}.demand_facts FINAL
                    WHERE outcome IN ({DISRUPTED}) AND waited_to_ms > %(f)s AND waited_from_ms < %(t)s
                    GROUP BY pod_uid) AS d ON d.pod_uid = s.pod_uid
        GROUP BY tenant_id, gpu_class, outcome
        ORDER BY borrowed_gpu_hours DESC, gpu_hours_held DESC, tenant_id, gpu_class, outcome"""
