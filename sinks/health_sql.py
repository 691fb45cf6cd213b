"""GPU health facts and incidents in ClickHouse: DDL and the queries that read them.

DDL as in sinks/schema_sql.py: ReplacingMergeTree with ``fact_id`` last in the sorting key
(a fact written twice collapses), read with FINAL, partitioned by the month of event time.
New columns are added with ``ADD COLUMN IF NOT EXISTS`` below the CREATE, so a table
created by an older release gains them (the statements are safe to run on every start).

Inventory reconciliation: the GPUs the evidence shows in ``[from, to)`` (every DCGM device
a health fact names, but not a vGPU guest's, and every GPU a PodResources or vGPU snapshot
handed out, from the capacity facts) set against the GPUs the inventory approves for any of that time.
"""

from __future__ import annotations

__all__ = ["HEALTH_COLUMNS", "INCIDENT_COLUMNS", "health_ddl_statements", "incidents_by_node_sql",
           "inventory_reconciliation_sql"]

HEALTH_COLUMNS = [
    "fact_id", "cluster_id", "node", "gpu_uuid", "gpu_instance_id", "profile", "model", "pci_bus_id",
    "observed_at_ms", "xid_last", "ecc_sbe_volatile_total", "ecc_dbe_volatile_total", "ecc_sbe_aggregate_total",
    "ecc_dbe_aggregate_total", "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_failure",
    "clock_event_reasons", "gpu_temp_c", "memory_temp_c", "pcie_replays_total", "nvlink_crc_flit_errors_total",
    "nvlink_crc_data_errors_total", "nvlink_replay_errors_total", "nvlink_recovery_errors_total", "fb_total_bytes",
    "fb_free_bytes", "fb_used_bytes", "fb_reserved_bytes", "power_violation_s", "thermal_violation_s",
    "src_topic", "src_partition", "src_offset",
]
INCIDENT_COLUMNS = [
    "fact_id", "cluster_id", "node", "gpu_uuid", "gpu_instance_id", "observed_at_ms", "kind", "code", "severity",
    "detail", "health_fact_id", "src_topic", "src_partition", "src_offset",
]


def health_ddl_statements(db: str) -> list[str]:
    return [
        # ORDER BY (cluster, GPU, time, fact_id): a GPU's history is one range (panels per GPU,
        # the incident's surrounding samples); fact_id last is the dedup key.
        f"""CREATE TABLE IF NOT EXISTS {db}.gpu_health_facts (
            fact_id String, cluster_id LowCardinality(String), node LowCardinality(String), gpu_uuid String,
            gpu_instance_id Nullable(Int32), profile LowCardinality(String), model LowCardinality(String),
            pci_bus_id String, observed_at_ms Int64, xid_last Nullable(Int64),
            ecc_sbe_volatile_total Nullable(Int64), ecc_dbe_volatile_total Nullable(Int64),
            ecc_sbe_aggregate_total Nullable(Int64), ecc_dbe_aggregate_total Nullable(Int64),
            remapped_rows_correctable Nullable(Int64), remapped_rows_uncorrectable Nullable(Int64),
            row_remap_failure Nullable(Int64), clock_event_reasons Nullable(Int64),
            gpu_temp_c Nullable(Float64), memory_temp_c Nullable(Float64), pcie_replays_total Nullable(Int64),
            nvlink_crc_flit_errors_total Nullable(Int64), nvlink_crc_data_errors_total Nullable(Int64),
            nvlink_replay_errors_total Nullable(Int64), nvlink_recovery_errors_total Nullable(Int64),
            fb_total_bytes Nullable(Int64), fb_free_bytes Nullable(Int64), fb_used_bytes Nullable(Int64),
            fb_reserved_bytes Nullable(Int64), power_violation_s Nullable(Float64),
            thermal_violation_s Nullable(Float64),
            src_topic LowCardinality(String), src_partition UInt32, src_offset UInt64,
            observed_at DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(observed_at_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(observed_at)
        ORDER BY (cluster_id, gpu_uuid, observed_at, fact_id)""",
        # Few rows: ORDER BY (cluster, time, fact_id) for "incidents in the window".
        f"""CREATE TABLE IF NOT EXISTS {db}.gpu_health_incidents (
            fact_id String, cluster_id LowCardinality(String), node LowCardinality(String), gpu_uuid String,
            gpu_instance_id Nullable(Int32), observed_at_ms Int64, kind LowCardinality(String), code Int64,
            severity LowCardinality(String), detail String, health_fact_id String,
            src_topic LowCardinality(String), src_partition UInt32, src_offset UInt64,
            observed_at DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(observed_at_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(observed_at) ORDER BY (cluster_id, observed_at, fact_id)""",
    ]


def inventory_reconciliation_sql(db: str) -> str:
    """Parameters ``from_ms``, ``to_ms``. Rows (cluster_id, gpu_uuid, node, finding, sources):
    ``not_in_inventory`` (evidence names a GPU the inventory does not approve at any time of the
    window) or ``no_evidence`` (an approved GPU no source mentioned in the window)."""
    return f"""
    WITH evidence AS (
        SELECT cluster_id, gpu_uuid, any(node) AS node, arrayStringConcat(arraySort(groupUniqArray(source)), ',') AS sources
        FROM (
            SELECT cluster_id, gpu_uuid, node, 'dcgm' AS source FROM {db}.gpu_health_facts FINAL
            WHERE observed_at_ms >= %(from_ms)s AND observed_at_ms < %(to_ms)s AND NOT startsWith(model, 'GRID ')
            UNION ALL
            SELECT cluster_id, gpu_uuid, node, if(workload_kind = 'vm', 'vgpu', 'podresources') AS source
            FROM {db}.capacity_facts FINAL
            WHERE valid_from_ms < %(to_ms)s AND valid_to_ms > %(from_ms)s
              AND kind IN ('allocated', 'over_allocated', 'outside_inventory')
        ) GROUP BY cluster_id, gpu_uuid
    ),
    approved AS (
        SELECT cluster_id, gpu_uuid, any(node) AS node FROM {db}.inventory_gpus FINAL
        WHERE valid_from_ms < %(to_ms)s AND (valid_to_ms IS NULL OR valid_to_ms > %(from_ms)s)
        GROUP BY cluster_id, gpu_uuid
    )
    SELECT cluster_id, gpu_uuid, node, finding, sources FROM (
        SELECT e.cluster_id AS cluster_id, e.gpu_uuid AS gpu_uuid, e.node AS node,
               'not_in_inventory' AS finding, e.sources AS sources
        FROM evidence AS e LEFT ANTI JOIN approved AS a ON a.cluster_id = e.cluster_id AND a.gpu_uuid = e.gpu_uuid
        UNION ALL
        SELECT a.cluster_id AS cluster_id, a.gpu_uuid AS gpu_uuid, a.node AS node,
               'no_evidence' AS finding, '' AS sources
        FROM approved AS a LEFT ANTI JOIN evidence AS e ON a.cluster_id = e.cluster_id AND a.gpu_uuid = e.gpu_uuid
    )
    ORDER BY finding, cluster_id, node, gpu_uuid"""


def incidents_by_node_sql(db: str) -> str:
    """Parameters ``from_ms``, ``to_ms``: (cluster_id, node, kind, severity, incidents)."""
    return f"""
    SELECT cluster_id, node, kind, severity, count() FROM {db}.gpu_health_incidents FINAL
    WHERE observed_at_ms >= %(from_ms)s AND observed_at_ms < %(to_ms)s
    GROUP BY cluster_id, node, kind, severity ORDER BY cluster_id, node, kind, severity"""
