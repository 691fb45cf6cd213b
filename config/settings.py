"""The one frozen settings object of a gpuledger process.

Order of precedence: flags (passed as overrides by the CLI), environment
(``GPULEDGER_*``), defaults. Nothing below the CLI reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings every gpuledger command honours."""

    model_config = SettingsConfigDict(env_prefix="GPULEDGER_", frozen=True, extra="forbid")

    home: Path = Field(Path("./.gpuledger"), description="All local state: broker data, embedded ClickHouse, pid files.")
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Where Kafka clients connect; `stack up` listens here.")
    clickhouse_dsn: str = Field("", description="chdb://PATH (embedded, default $HOME/clickhouse) or http://host:port.")
    kafka_libs: Path = Field(Path("./.cache/kafka-3.9.2/libs"), description="Folder with the Kafka 3.9.2 jars.")
    kafka_heap_opts: str = Field("-Xms256m -Xmx768m", description="JVM heap flags of the local broker.")
    topic_prefix: str = Field("gpuledger", description="Prefix of every topic name; two stacks on one broker differ here.")
    source_partitions: int = Field(4, ge=1, description="Partitions of each source topic (keyed by durable id).")
    audit_retention_days: int = Field(
        400, ge=1, description="How long source and dead-letter topics keep evidence (set when topics are created).")
    podresources_grace_s: float = Field(
        120.0, ge=0, description="How far a node's PodResources may lag the other nodes before its samples are judged without it."
    )
    stale_ceiling_s: float = Field(
        300.0, gt=0, description="Longest time one sample (DCGM scrape, PodResources or vGPU snapshot) can stand for; "
        "below it the limit is 4 of the source's own observed intervals (median of its recent ones).")
    max_future_skew_s: float = Field(
        86400.0, gt=0, description="How far ahead an event time may be: ingest and the producers refuse records more "
        "than this ahead of the publisher's clock (the broker's, where a producer measures it), and the worker those "
        "more than this ahead of their ingested_at.")
    batch_max_records: int = Field(2000, ge=1, description="Records per processing batch (write, then commit).")
    batch_max_wait_s: float = Field(0.5, gt=0, description="Longest wait to fill a processing batch.")
    checkpoint_interval_s: float = Field(5.0, ge=0, description="Seconds between a worker's commits: facts flushed, "
                                         "state snapshots written, then source offsets committed (0 = every batch).")
    workers: int = Field(1, ge=1, description="Attribution workers `gpuledger process` runs (one consumer group).")
    allowed_lateness_s: float = Field(
        3600.0, ge=0, description="How late (event time) a PodResources snapshot may still fill a gap in evidence; "
        "ownership history older than this plus the grace is pruned from memory (its facts are written).")
    read_ahead_s: float = Field(
        300.0, gt=0, description="Event-time lead a source partition may take over the slowest one before it is "
        "paused (reading is paced across topics, so memory does not depend on fetch order).")
    sink_batch_records: int = Field(50_000, ge=1, description="Fact records the sink writes to ClickHouse per batch.")
    sink_metrics_port: int = Field(
        -1, ge=-1, description="Port of the sink's Prometheus /metrics: store errors, refused rows (0 = any free port, "
        "-1 = off).")
    query_port: int = Field(0, ge=0, description="Port of the worker's query endpoint (0 = any free port).")
    worker_metrics_port: int = Field(
        -1, ge=-1, description="Port of the `process` worker's Prometheus /metrics (0 = any free port, -1 = off).")
    close_max_unattributed_ratio: float = Field(
        0.02, ge=0, description="Close refuses when capacity allocated with no tenant exceeds this share of physical.")
    close_max_difference_ratio: float = Field(
        0.01, ge=0, description="Close refuses when physical capacity not accounted for by evidence exceeds this share.")
    close_max_unpriced_gpu_hours: float = Field(
        0.0, ge=0, description="Close refuses when more allocated GPU-hours than this have no rate.")
    close_max_outside_inventory_gpu_hours: float = Field(
        0.0, ge=0, description="Close refuses when more GPU-hours than this of evidence fall on GPUs outside the "
        "approved inventory (publish the inventory instead).")
    failpoint_store_outage: tuple[float, float] | None = Field(
        None, description="Fault suite only: refuse store writes from AFTER_S after start for FOR_S seconds.")
    failpoint_clock_skew_s: float = Field(
        0.0, description="Fault suite only: this producer's host clock reads this many seconds off the true time.")
    provider_name: str = Field("GPU platform", description="FOCUS ProviderName, PublisherName and InvoiceIssuerName.")
    central_account: str = Field("platform-central", description="FOCUS BillingAccountId of the central budget.")

    # -- live producers (`gpuledger produce SOURCE`, `gpuledger capture`) -------------------
    cluster_id: str = Field("", description="Cluster the live producers observe (the capture manifest's cluster_id).")
    node_name: str = Field("", description="Node a node producer runs on (PodResources, DCGM); default: the host name.")
    scrape_interval_s: float = Field(10.0, gt=0, description="Seconds between polls of PodResources, DCGM, vGPU and vLLM.")
    producer_metrics_port: int = Field(-1, ge=-1, description="Port of a producer's /metrics (0 = any free port, -1 = off).")
    metrics_addr: str = Field("0.0.0.0", description="Address the /metrics of a producer, worker or sink listens on (127.0.0.1 = this host only).")
    kube_api_url: str = Field("", description="Kubernetes API server URL; empty = kubeconfig, then in-cluster config.")
    kubeconfig: Path | None = Field(None, description="kubeconfig file for the Kubernetes watch (default ~/.kube/config).")
    watch_timeout_s: int = Field(300, ge=1, description="Seconds one watch request stays open before it is renewed.")
    podresources_socket: Path = Field(Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
                                      description="The kubelet's PodResources gRPC unix socket.")
    dcgm_url: str = Field("http://127.0.0.1:9400/metrics", description="dcgm-exporter's /metrics URL on this node.")
    vgpu_command: str = Field("nvidia-smi vgpu -q", description="Command that prints the host's vGPUs (nvidia-smi vgpu -q).")
    vgpu_gpus_command: str = Field("nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader",
                                   description="Command that maps the host's PCI bus ids to GPU UUIDs.")
    vgpu_owners: Path | None = Field(None, description="JSON file: VM (uuid or name) -> tenant, project, cost center.")
    requests_log: Path | None = Field(None, description="JSONL access log of the model servers, tailed for request events.")
    requests_listen: str = Field("", description="host:port where request events are accepted over HTTP (POST /v1/requests).")
    vllm_url: str = Field("", description="vLLM /metrics URL; its token totals are checked against the request events.")
    clock_sync: bool = Field(True, description="Measure this host's clock against the broker's and correct observed_at.")

    def effective_dsn(self) -> str:
        """The ClickHouse DSN, defaulting to the embedded engine under home."""
        return self.clickhouse_dsn or f"chdb://{(self.home / 'clickhouse').resolve()}"


def load_settings(**overrides: Any) -> Settings:
    """Build the settings: explicit overrides (flags) over environment over defaults."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
