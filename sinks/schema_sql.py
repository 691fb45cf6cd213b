"""ClickHouse DDL as tested values: each function returns the statement for a database.

Every fact table is a ReplacingMergeTree whose sorting key ends in ``fact_id`` (the
deterministic id), so a fact written twice (a batch replayed after a crash) collapses to
one row; queries read with FINAL. Tables are partitioned by the month of event time so a
rebuilt month can replace its partition whole.
"""

from __future__ import annotations

__all__ = ["CAPACITY_COLUMNS", "DEMAND_COLUMNS", "MODEL_COLUMNS", "REQUEST_COLUMNS", "UTILIZATION_COLUMNS",
           "ddl_statements"]

CAPACITY_COLUMNS = [
    "fact_id", "cluster_id", "kind", "gpu_uuid", "device_id", "node", "gpu_class", "mode", "profile", "capacity_fraction",
    "valid_from_ms", "valid_to_ms", "tenant_id", "project_id", "cost_center", "namespace", "namespace_uid",
    "pod_name", "pod_uid", "container", "endpoint_id", "workload_kind", "confidence", "reason", "src_topic",
    "src_partition", "src_offset",
]
UTILIZATION_COLUMNS = [
    "fact_id", "cluster_id", "gpu_uuid", "device_id", "node", "observed_at_ms", "span_ms", "sm_active_ratio", "fb_used_bytes",
    "power_w", "energy_j", "capacity_fact_id", "kind", "tenant_id", "project_id", "namespace", "pod_name",
    "pod_uid", "confidence", "reason", "src_topic", "src_partition", "src_offset",
]


REQUEST_COLUMNS = [
    "fact_id", "cluster_id", "endpoint_id", "model", "revision", "request_id", "tenant_id", "project_id",
    "observed_at_ms", "arrived_at_ms", "outcome", "input_tokens", "output_tokens", "queue_s", "ttft_s", "e2e_s",
    "src_topic", "src_partition", "src_offset",
]


MODEL_COLUMNS = [
    "fact_id", "cluster_id", "endpoint_id", "runtime", "model", "revision", "pod_name", "observed_at_ms", "span_ms",
    "requests_running", "requests_waiting", "kv_cache_usage_ratio", "prompt_tokens", "generation_tokens",
    "generation_tokens_per_s", "requests_finished", "inter_token_latency_s", "inter_token_count", "batch_size_mean",
    "batch_tokens_mean", "src_topic", "src_partition", "src_offset",
]


DEMAND_COLUMNS = [
    "fact_id", "cluster_id", "tenant_id", "namespace", "pod_name", "pod_uid", "profile", "instances",
    "waited_from_ms", "waited_to_ms", "outcome", "node", "scheduled_ms", "running_ms", "priority_class", "priority",
]


def ddl_statements(db: str) -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {db}",
        # ORDER BY (cluster, time, fact_id): time-range scans for showback; fact_id last makes
        # the dedup key; valid_from is a function of fact_id so a fact never changes partition.
        f"""CREATE TABLE IF NOT EXISTS {db}.capacity_facts (
            fact_id String, cluster_id LowCardinality(String), kind LowCardinality(String),
            gpu_uuid String, device_id String, node LowCardinality(String), gpu_class LowCardinality(String),
            mode LowCardinality(String), profile LowCardinality(String), capacity_fraction Float64,
            valid_from_ms Int64, valid_to_ms Int64,
            tenant_id LowCardinality(String), project_id LowCardinality(String), cost_center LowCardinality(String),
            namespace String, namespace_uid String, pod_name String, pod_uid String, container String,
            endpoint_id String, workload_kind LowCardinality(String), confidence LowCardinality(String), reason String,
            src_topic LowCardinality(String), src_partition UInt32, src_offset UInt64,
            valid_from DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(valid_from_ms, 'UTC'),
            valid_to DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(valid_to_ms, 'UTC'),
            gpu_hours Float64 MATERIALIZED capacity_fraction * (valid_to_ms - valid_from_ms) / 3600000
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(valid_from) ORDER BY (cluster_id, valid_from, fact_id)""",
        f"""CREATE TABLE IF NOT EXISTS {db}.utilization_facts (
            fact_id String, cluster_id LowCardinality(String), gpu_uuid String, device_id String,
            node LowCardinality(String), observed_at_ms Int64, span_ms Int64, sm_active_ratio Nullable(Float64), fb_used_bytes Nullable(Int64),
            power_w Nullable(Float64), energy_j Nullable(Float64), capacity_fact_id String, kind LowCardinality(String),
            tenant_id LowCardinality(String), project_id LowCardinality(String), namespace String, pod_name String,
            pod_uid String, confidence LowCardinality(String), reason String,
            src_topic LowCardinality(String), src_partition UInt32, src_offset UInt64,
            observed_at DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(observed_at_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(observed_at) ORDER BY (cluster_id, observed_at, fact_id)""",
        # Productive work: one row per request, latencies kept whole for quantiles.
        f"""CREATE TABLE IF NOT EXISTS {db}.request_facts (
            fact_id String, cluster_id LowCardinality(String), endpoint_id LowCardinality(String),
            model LowCardinality(String), revision LowCardinality(String), request_id String,
            tenant_id LowCardinality(String), project_id LowCardinality(String),
            observed_at_ms Int64, arrived_at_ms Int64, outcome LowCardinality(String),
            input_tokens Int64, output_tokens Int64, queue_s Nullable(Float64), ttft_s Nullable(Float64),
            e2e_s Nullable(Float64), src_topic LowCardinality(String), src_partition UInt32, src_offset UInt64,
            observed_at DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(observed_at_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(observed_at) ORDER BY (cluster_id, fact_id)""",
        # GPU pods' waits (whole GPUs and MIG profiles: scheduling and startup delays; MIG waits
        # against free MIG capacity show fragmentation) and how their lives ended.
        f"""CREATE TABLE IF NOT EXISTS {db}.demand_facts (
            fact_id String, cluster_id LowCardinality(String), tenant_id LowCardinality(String), namespace String,
            pod_name String, pod_uid String, profile LowCardinality(String), instances UInt32,
            waited_from_ms Int64, waited_to_ms Int64, outcome LowCardinality(String),
            node LowCardinality(String), scheduled_ms Nullable(Int64), running_ms Nullable(Int64),
            priority_class LowCardinality(String), priority Nullable(Int32),
            waited_from DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(waited_from_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(waited_from) ORDER BY (cluster_id, fact_id)""",
        # Model efficiency: one row per model server scrape, endpoint, model and revision (gauges
        # as read, counters' increases over span_ms). ORDER BY (cluster, endpoint, time, fact_id):
        # an endpoint's series over a time range, revisions side by side.
        f"""CREATE TABLE IF NOT EXISTS {db}.model_facts (
            fact_id String, cluster_id LowCardinality(String), endpoint_id LowCardinality(String),
            runtime LowCardinality(String), model LowCardinality(String), revision LowCardinality(String),
            pod_name String, observed_at_ms Int64, span_ms Int64,
            requests_running Nullable(Float64), requests_waiting Nullable(Float64),
            kv_cache_usage_ratio Nullable(Float64), prompt_tokens Nullable(Float64),
            generation_tokens Nullable(Float64), generation_tokens_per_s Nullable(Float64),
            requests_finished Nullable(Float64), inter_token_latency_s Nullable(Float64),
            inter_token_count Nullable(Float64), batch_size_mean Nullable(Float64), batch_tokens_mean Nullable(Float64),
            src_topic LowCardinality(String), src_partition UInt32, src_offset UInt64,
            observed_at DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(observed_at_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(observed_at)
        ORDER BY (cluster_id, endpoint_id, observed_at, fact_id)""",
        # Reference documents, one per cluster and kind (the greatest observed_at_ms, the earliest
        # validity, wins): what dashboards read as the current ones. Pricing reads the history.
        f"""CREATE TABLE IF NOT EXISTS {db}.reference_documents (
            cluster_id LowCardinality(String), kind LowCardinality(String), observed_at_ms Int64, document String
        ) ENGINE = ReplacingMergeTree(observed_at_ms) ORDER BY (cluster_id, kind)""",
        # Every reference document ever published (domain/reference_history.py decides what is in
        # force), only ever appended to. ORDER BY ends in the document's hash: the same document
        # delivered twice is one row, which keeps its latest publication (the version column).
        # Small (a row per publication): no partitions.
        f"""CREATE TABLE IF NOT EXISTS {db}.reference_history (
            cluster_id LowCardinality(String), kind LowCardinality(String), observed_at_ms Int64,
            published_at_ms Int64, document String,
            published_at DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(published_at_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree(published_at_ms)
        ORDER BY (cluster_id, kind, observed_at_ms, sipHash128(document))""",
        # The approved inventory: every document's GPU entries, the latest published winning for
        # the same GPU and valid_from (physical capacity comes from here).
        f"""CREATE TABLE IF NOT EXISTS {db}.inventory_gpus (
            cluster_id LowCardinality(String), gpu_uuid String, node String, model String, gpu_class String,
            mode String, valid_from_ms Int64, valid_to_ms Nullable(Int64), document_ms Int64
        ) ENGINE = ReplacingMergeTree(document_ms) ORDER BY (cluster_id, gpu_uuid, valid_from_ms)""",
        f"""CREATE TABLE IF NOT EXISTS {db}.inventory_unavailable (
            cluster_id LowCardinality(String), gpu_uuid String, from_ms Int64, to_ms Int64, reason String,
            document_ms Int64
        ) ENGINE = ReplacingMergeTree(document_ms) ORDER BY (cluster_id, gpu_uuid, from_ms)""",
        # v2 (MIG, time-slicing): tables created by v1 gain the unit columns.
        f"ALTER TABLE {db}.capacity_facts ADD COLUMN IF NOT EXISTS device_id String AFTER gpu_uuid",
        f"ALTER TABLE {db}.capacity_facts ADD COLUMN IF NOT EXISTS profile LowCardinality(String) AFTER mode",
        f"ALTER TABLE {db}.capacity_facts ADD COLUMN IF NOT EXISTS workload_kind LowCardinality(String) "
        "DEFAULT 'pod' AFTER endpoint_id",
        f"ALTER TABLE {db}.utilization_facts ADD COLUMN IF NOT EXISTS device_id String AFTER gpu_uuid",
        # demand_fact v3 (scheduler delays): tables created before it gain the bind, start and priority.
        f"ALTER TABLE {db}.demand_facts ADD COLUMN IF NOT EXISTS node LowCardinality(String) AFTER outcome",
        f"ALTER TABLE {db}.demand_facts ADD COLUMN IF NOT EXISTS scheduled_ms Nullable(Int64) AFTER node",
        f"ALTER TABLE {db}.demand_facts ADD COLUMN IF NOT EXISTS running_ms Nullable(Int64) AFTER scheduled_ms",
        f"ALTER TABLE {db}.demand_facts ADD COLUMN IF NOT EXISTS priority_class LowCardinality(String) "
        "AFTER running_ms",
        f"ALTER TABLE {db}.demand_facts ADD COLUMN IF NOT EXISTS priority Nullable(Int32) AFTER priority_class",
        # Processor checkpoints: state + the offsets it reflects, written after the facts.
        f"""CREATE TABLE IF NOT EXISTS {db}.processor_checkpoints (
            processor String, seq UInt64, offsets String, state String
        ) ENGINE = ReplacingMergeTree(seq) ORDER BY processor""",
        # Closed periods: append-only (plain MergeTree, only ever INSERTed); the first close of
        # a period is the ledger, later ones are refused before they are written.
        f"""CREATE TABLE IF NOT EXISTS {db}.ledger_documents (
            period String, hash String, closed_at_ms Int64, document String
        ) ENGINE = MergeTree ORDER BY (period, closed_at_ms)""",
        # Prepared periods waiting for approval (`close` prepares, `close --approve` closes): the
        # latest per period counts; only ever INSERTed.
        f"""CREATE TABLE IF NOT EXISTS {db}.ledger_prepared (
            period String, hash String, prepared_at_ms Int64, document String,
            inserted_at DateTime64(6, 'UTC') DEFAULT now64(6)
        ) ENGINE = MergeTree ORDER BY (period, prepared_at_ms)""",
        # `gpuledger forecast --save`: demand curves, peak forecasts and the capacity plan in
        # long form. Small (classes x measures x weeks): no partitions. A run replaces the rows
        # of the same series and bucket (the newest as-of wins), so a week's actual and its
        # earlier forecast sit side by side; plan rows are kept per as-of (their bucket starts at it).
        f"""CREATE TABLE IF NOT EXISTS {db}.capacity_forecasts (
            as_of_ms Int64, gpu_class LowCardinality(String), profile LowCardinality(String),
            mode LowCardinality(String), model LowCardinality(String), measure LowCardinality(String),
            bucket LowCardinality(String), bucket_start_ms Int64, kind LowCardinality(String), peak Float64,
            mean Nullable(Float64),
            bucket_start DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(bucket_start_ms, 'UTC'),
            as_of DateTime64(3, 'UTC') MATERIALIZED fromUnixTimestamp64Milli(as_of_ms, 'UTC')
        ) ENGINE = ReplacingMergeTree(as_of_ms)
        ORDER BY (gpu_class, profile, mode, model, measure, bucket, kind, bucket_start_ms)""",
    ]
