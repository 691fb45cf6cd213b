"""The one frozen settings object of a gpuledger process.

Order of precedence: flags (passed as overrides by the CLI), environment
(``GPULEDGER_*``), defaults. Nothing below the CLI reads the environment.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlsplit, urlunsplit
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuledger.domain.cadence import MAX_STALE_CEILING_MS


class Settings(BaseSettings):
    """Settings every gpuledger command honours."""

    model_config = SettingsConfigDict(env_prefix="GPULEDGER_", frozen=True, extra="forbid", hide_input_in_errors=True)

    home: Path = Field(Path("./.gpuledger"), description="All local state: broker data, embedded ClickHouse, pid files.")
    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Where Kafka clients connect; `stack up` listens here.")
    clickhouse_dsn: str = Field("", description="chdb://PATH (embedded, default $HOME/clickhouse) or http://host:port.")
    kafka_libs: Path = Field(Path("./.cache/kafka-3.9.2/libs"), description="Folder with the Kafka 3.9.2 jars.")
    kafka_heap_opts: str = Field("-Xms256m -Xmx768m", description="JVM heap flags of the local broker.")
    # -- Kafka client security: every producer, consumer and admin client (bus/security.py) --
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="How Kafka clients connect: TLS (SSL), SASL authentication (SASL_PLAINTEXT), both "
        "(SASL_SSL) or neither.")
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "SCRAM-SHA-512", description="SASL mechanism of the SASL_* protocols.")
    kafka_sasl_username: str = Field("", description="SASL user name (required by the SASL_* protocols).")
    kafka_sasl_password: SecretStr = Field(SecretStr(""), description="SASL password (required by the SASL_* "
                                           "protocols; never printed).")
    kafka_ssl_ca_location: Path | None = Field(None, description="PEM file of the CA(s) that signed the broker's "
                                               "certificate (SSL, SASL_SSL); unset = the system's CAs.")
    kafka_ssl_certificate_location: Path | None = Field(None, description="PEM client certificate, for brokers that "
                                                        "require mutual TLS (with the key).")
    kafka_ssl_key_location: Path | None = Field(None, description="PEM private key of the client certificate.")
    kafka_ssl_key_password: SecretStr = Field(SecretStr(""), description="Password of an encrypted client key.")

    @model_validator(mode="after")
    def _kafka_security_consistent(self) -> Settings:
        protocol = self.kafka_security_protocol
        sasl, tls = protocol.startswith("SASL_"), protocol.endswith("SSL")
        has_password = bool(self.kafka_sasl_password.get_secret_value())
        if sasl and not (self.kafka_sasl_username and has_password):
            raise ValueError(f"kafka_security_protocol {protocol} needs GPULEDGER_KAFKA_SASL_USERNAME and "
                             "GPULEDGER_KAFKA_SASL_PASSWORD")
        if not sasl and (self.kafka_sasl_username or has_password):
            raise ValueError(f"SASL credentials are set but kafka_security_protocol {protocol} does not use them: "
                             "set GPULEDGER_KAFKA_SECURITY_PROTOCOL=SASL_SSL")
        tls_files = [name for name in ("kafka_ssl_ca_location", "kafka_ssl_certificate_location",
                                       "kafka_ssl_key_location") if getattr(self, name) is not None]
        if tls_files and not tls:
            raise ValueError(f"{', '.join(tls_files)} set but kafka_security_protocol {protocol} has no TLS: "
                             "set GPULEDGER_KAFKA_SECURITY_PROTOCOL=SSL or SASL_SSL")
        if (self.kafka_ssl_certificate_location is None) != (self.kafka_ssl_key_location is None):
            raise ValueError("a client certificate needs both kafka_ssl_certificate_location and kafka_ssl_key_location")
        return self

    topic_prefix: str = Field("gpuledger", description="Prefix of every topic name; two stacks on one broker differ here.")
    source_partitions: int = Field(4, ge=1, description="Partitions of each source topic (keyed by durable id).")
    audit_retention_days: int = Field(
        400, ge=1, description="How long source and dead-letter topics keep evidence (set when topics are created).")
    podresources_grace_s: float = Field(
        120.0, ge=0, description="How far a node's PodResources may lag the other nodes before its samples are judged without it."
    )
    stale_ceiling_s: float = Field(
        300.0, gt=0, le=MAX_STALE_CEILING_MS / 1000,
        description="Longest time one sample (DCGM scrape, PodResources or vGPU snapshot) can stand for; "
        "below it the limit is 4 of the source's own observed intervals (median of its recent ones); at most 2 h.")
    max_future_skew_s: float = Field(
        86400.0, gt=0, description="How far ahead an event time may be: ingest and the producers refuse records more "
        "than this ahead of the publisher's clock (the broker's, where a producer measures it), and the worker those "
        "more than this ahead of their ingested_at.")
    batch_max_records: int = Field(
        500, ge=1, description="Records a worker takes per consume before producing their facts: what one pass holds "
        "at once (decoded records, samples, facts) and so the worker's peak memory.")
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
    sink_batch_records: int = Field(50_000, ge=1, description="Facts the sink writes to ClickHouse per batch: fewer than this plus 2,048 (a batch record is taken whole).")
    sink_metrics_port: int = Field(
        -1, ge=-1, description="Port of the sink's Prometheus /metrics: store errors, refused rows (0 = any free port, "
        "-1 = off).")
    query_port: int = Field(0, ge=0, description="Port of the query endpoint of `process` (0 = any free port).")
    query_addr: str = Field("127.0.0.1", description="Address the query endpoint listens on (loopback unless set).")
    query_token: SecretStr | None = Field(
        None, description="Bearer token the query endpoint requires; unset = a random one per start, written to "
        "HOME/query.token (mode 0600) for the local CLI.")
    query_max_execution_s: float = Field(30.0, gt=0, description="Time limit of one query through the endpoint.")
    query_max_memory_bytes: int = Field(2 << 30, gt=0, description="Memory limit of one query through the endpoint.")
    query_max_result_rows: int = Field(1_000_000, gt=0, description="Rows one query through the endpoint may return.")
    query_max_body_bytes: int = Field(1 << 20, gt=0, description="Largest query request body the endpoint reads.")
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
    close_bill_confidence: str = Field(
        "high,medium", pattern=r"^(high|medium|modeled)(,(high|medium|modeled))*$",
        description="Confidence classes of allocated hours that bill tenants (comma-separated); the others are "
        "suspense, under review until `gpuledger suspense assign` settles them.")
    close_telemetry_unknown: Literal["bill", "suspense"] = Field(
        "bill", description="Allocated hours without telemetry (the device reported nothing while held): `bill` "
        "them like the rest, or put them in `suspense`, under review until `gpuledger suspense assign` settles them.")
    close_unattributed: Literal["suspense", "central"] = Field(
        "suspense", description="Capacity allocated with no tenant (unattributed): hold it in `suspense` per holder "
        "(namespace or VM) until `gpuledger suspense assign` gives it to a tenant or central, or charge it to "
        "`central` directly.")
    close_require_distinct_approver: bool = Field(
        True, description="`close --approve` refuses an approver with the preparer's name (four eyes).")
    failpoint_store_outage: tuple[float, float] | tuple[float, float, int] | None = Field(
        None, description="Fault suite only: refuse store writes for FOR_S seconds from the first write AFTER_S "
        "after start and after AFTER_WRITES (default 0) fact writes went through: [AFTER_S, FOR_S(, AFTER_WRITES)].")
    failpoint_drop_table: Literal["capacity_facts", "utilization_facts", "request_facts", "demand_facts"] | None = Field(
        None, description="Fault suite only: `process` drops this fact table once its schema is in place (the "
        "query endpoint cannot: it is read-only).")
    failpoint_clock_skew_s: float = Field(
        0.0, description="Fault suite only: this producer's host clock reads this many seconds off the true time.")
    provider_name: str = Field("GPU platform", description="FOCUS ProviderName, PublisherName and InvoiceIssuerName.")
    central_account: str = Field("platform-central", description="FOCUS BillingAccountId of the central budget.")

    # -- live producers (`gpuledger produce SOURCE`, `gpuledger capture`) -------------------
    cluster_id: str = Field("", description="Cluster the live producers observe (the capture manifest's cluster_id).")
    node_name: str = Field("", description="Node a node producer runs on (PodResources, DCGM); default: the host name.")
    scrape_interval_s: float = Field(10.0, gt=0, description="Seconds between polls of PodResources, DCGM, vGPU and vLLM.")
    producer_metrics_port: int = Field(-1, ge=-1, description="Port of a producer's /metrics (0 = any free port, -1 = off).")
    metrics_addr: str = Field("127.0.0.1", description="Address the /metrics of a producer, worker, sink or the fleet gauges listens on (0.0.0.0 = every interface, for a Prometheus on another host).")
    metrics_token: SecretStr | None = Field(
        None, description="Bearer token every /metrics requires when set (Prometheus: authorization.credentials_file).")

    def metrics_secret(self) -> str | None:
        return self.metrics_token.get_secret_value() if self.metrics_token else None
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
    requests_reporters: Path | None = Field(
        None, description="JSON document of the reporters that may POST request events: name, SHA-256 of the "
        "bearer token, tenants and endpoints each may report for (required with requests_listen).")
    vllm_url: str = Field("", description="vLLM /metrics URL; its token totals are checked against the request events.")
    model_metrics_url: str = Field("", description="A model server's /metrics URL (vLLM, Triton, NIM) that "
                                   "`produce model-metrics` scrapes.")
    model_endpoint_id: str = Field("", description="The endpoint the scraped model server serves (model-metrics).")
    model_runtime: str = Field("", description="vllm, triton or nim; empty: told by the metric names (model-metrics).")
    model_pod: str = Field("", description="The scraped model server's pod, where one server is one pod (model-metrics).")
    model_revision: str = Field("", description="The revision the model server serves, when its labels do not say it.")
    clock_sync: bool = Field(True, description="Measure this host's clock against the broker's and correct observed_at.")

    def shown_dsn(self) -> str:
        """The DSN as it may be printed: any password replaced by ``***``."""
        return redact_dsn(self.effective_dsn())

    def effective_dsn(self) -> str:
        """The ClickHouse DSN, defaulting to the embedded engine under home."""
        return self.clickhouse_dsn or f"chdb://{(self.home / 'clickhouse').resolve()}"


def redact_dsn(dsn: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://user:***@host``; the password of a
    ``password=`` query parameter too."""
    parts = urlsplit(dsn)
    if "@" not in parts.netloc and "=" not in parts.query:
        return dsn
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else netloc
    query = "&".join(f"{k}=***" if k.lower() in ("password", "pass", "token") else f"{k}={v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def load_settings(**overrides: Any) -> Settings:
    """Build the settings: explicit overrides (flags) over environment over defaults."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
