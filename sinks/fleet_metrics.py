"""Fleet gauges for the business alerts, computed from the ClickHouse facts.

A periodic query (restart-safe: nothing is kept between refreshes) over the newest window of
event time: ``[end - window, end)`` where ``end`` is the earlier of now and the end of the
newest capacity fact (facts settle after the watch watermark passes, so the last minutes
are not there yet; a pipeline that stopped shows as ``gpuledger_fleet_window_end_timestamp_seconds``
falling behind, not as a fleet that emptied). Quantities are mean GPU-equivalents held over
the window (GPU-ms / window ms).

- ``gpuledger_fleet_unattributed_gpus{cluster_id, reason}``: allocated with no tenant
  identity (confidence ``unattributed``), by reason class (``namespace_without_tenant``, ...).
- ``gpuledger_fleet_allocated_gpus`` / ``gpuledger_fleet_idle_allocated_gpus`` /
  ``gpuledger_fleet_unknown_activity_gpus{cluster_id, tenant_id}``: held by a tenant; of which
  by holdings whose mean SM-active ratio was below the idle threshold; of which without samples.
- ``gpuledger_fleet_idle_allocated_node_gpus{cluster_id, tenant_id, node}``: the idle part per
  node (AllocatedButIdle is per node, so a node's health incident can inhibit it).
- ``gpuledger_fleet_gpus_without_telemetry{cluster_id, node}``: GPUs in service with no DCGM
  sample in the window while other GPUs of their node reported (a device problem: fallen off
  the bus, DCGM cannot read it); ``gpuledger_fleet_nodes_without_telemetry{cluster_id}``: nodes
  none of whose GPUs reported; the inventory's unavailability windows,
  ``gpuledger_fleet_unavailable_gpus{cluster_id, reason}``.
- ``gpuledger_fleet_gpu_health_incidents{cluster_id, node, kind, severity}``: health incidents
  (domain/gpu_incidents.py) in the window; ``gpuledger_fleet_inventory_mismatch_gpus{cluster_id,
  finding}``: the inventory reconciliation of the window (sinks/health_sql.py).
- ``gpuledger_fleet_requests{cluster_id, endpoint_id}``, ``gpuledger_fleet_failed_requests``,
  ``gpuledger_fleet_request_queue_seconds{cluster_id, endpoint_id, quantile}``,
  ``gpuledger_fleet_request_ttft_seconds{...}``: finished requests and latency quantiles.
- ``gpuledger_fleet_quota_gpus`` (guaranteed quota at the window's end),
  ``gpuledger_fleet_guaranteed_gpus``, ``gpuledger_fleet_borrowed_gpus{cluster_id, tenant_id,
  gpu_class}`` (held within / above quota, split per instant as in domain/quota.py),
  ``gpuledger_fleet_borrow_limit_gpus`` (where the quota sets ``borrow_limit_gpus``);
  ``gpuledger_fleet_class_gpus``, ``gpuledger_fleet_class_lendable_gpus`` (in service minus
  every tenant's guaranteed quota: what can be lent without taking a guarantee),
  ``gpuledger_fleet_class_borrowed_gpus{cluster_id, gpu_class}``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gpuledger.config.metrics_http import serve_metrics
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuledger.config import Settings
from gpuledger.domain.quota import Quota, quota_in_force, split_by_quota
from gpuledger.domain.reference_history import in_force
from gpuledger.sinks import fleet_sql as q
from gpuledger.sinks.base import StoreError
from gpuledger.sinks.health_sql import incidents_by_node_sql, inventory_reconciliation_sql
from gpuledger.sinks.query import QueryPort

__all__ = ["FAMILIES", "FleetCollector", "FleetExporter", "quota_at", "reason_class", "read_fleet", "serve_fleet_metrics"]

WINDOW_MS = 15 * 60_000
IDLE_SM_ACTIVE_RATIO = 0.05
QUANTILES = ("0.5", "0.95", "0.99")
_T, _TC = ("cluster_id", "tenant_id"), ("cluster_id", "tenant_id", "gpu_class")
_E, _EQ = ("cluster_id", "endpoint_id"), ("cluster_id", "endpoint_id", "quantile")
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpuledger_fleet_unattributed_gpus": ("GPU-equivalents allocated with no tenant identity, by reason class.",
                                          ("cluster_id", "reason")),
    "gpuledger_fleet_allocated_gpus": ("GPU-equivalents allocated to a tenant.", _T),
    "gpuledger_fleet_idle_allocated_gpus": ("GPU-equivalents held by holdings whose mean SM-active was below the "
                                            "idle threshold.", _T),
    "gpuledger_fleet_idle_allocated_node_gpus": ("Idle GPU-equivalents held, per tenant and node (what a node's "
                                                 "failure can explain).", ("cluster_id", "tenant_id", "node")),
    "gpuledger_fleet_unknown_activity_gpus": ("GPU-equivalents allocated with no DCGM sample (activity unknown).", _T),
    "gpuledger_fleet_gpus_without_telemetry": ("GPUs in service with no DCGM sample while their node's other GPUs "
                                               "reported.", ("cluster_id", "node")),
    "gpuledger_fleet_nodes_without_telemetry": ("Nodes none of whose GPUs had a DCGM sample.", ("cluster_id",)),
    "gpuledger_fleet_unavailable_gpus": ("GPU-equivalents unavailable per the inventory, by reason.",
                                         ("cluster_id", "reason")),
    "gpuledger_fleet_requests": ("Finished inference requests in the window.", _E),
    "gpuledger_fleet_failed_requests": ("Finished inference requests that did not succeed.", _E),
    "gpuledger_fleet_request_queue_seconds": ("Queue time quantiles of finished requests.", _EQ),
    "gpuledger_fleet_request_ttft_seconds": ("Time-to-first-token quantiles of finished requests.", _EQ),
    "gpuledger_fleet_quota_gpus": ("Guaranteed quota at the window's end.", _TC),
    "gpuledger_fleet_guaranteed_gpus": ("GPU-equivalents held within the guaranteed quota.", _TC),
    "gpuledger_fleet_borrowed_gpus": ("GPU-equivalents held above the guaranteed quota (borrowed).", _TC),
    "gpuledger_fleet_borrow_limit_gpus": ("Most GPU-equivalents the quota lets the tenant borrow, at the window's end.",
                                          _TC),
    "gpuledger_fleet_class_gpus": ("Physical GPUs of a class in the inventory.", ("cluster_id", "gpu_class")),
    "gpuledger_fleet_class_lendable_gpus": ("GPUs of a class in service beyond every tenant's guaranteed quota.",
                                            ("cluster_id", "gpu_class")),
    "gpuledger_fleet_class_borrowed_gpus": ("GPU-equivalents of a class held above quota, all tenants.",
                                            ("cluster_id", "gpu_class")),
    "gpuledger_fleet_gpu_health_incidents": ("GPU health incidents (XID, ECC, row remapping, throttling) in the "
                                             "window.", ("cluster_id", "node", "kind", "severity")),
    "gpuledger_fleet_inventory_mismatch_gpus": ("GPUs the evidence shows but the inventory does not approve "
                                                "(not_in_inventory), and approved GPUs no source mentions "
                                                "(no_evidence), in the window.", ("cluster_id", "finding")),
}
Samples = dict[str, dict[tuple[str, ...], float]]

_REASON_CLASSES = (  # (text in the reason written by domain/capacity.py or domain/vgpu.py, class)
    ("has no gpuledger.io/tenant label", "namespace_without_tenant"),
    ("unknown at that time", "namespace_unknown"),
    ("known at the snapshot time", "pod_unknown"),
    ("is not in the inventory", "device_not_in_inventory"),
    ("has no approved weight", "vgpu_profile_not_approved"),
    ("has no owner", "vm_without_owner"),
)


def reason_class(reason: str) -> str:
    """A bounded label for an unattribution reason (the text names pods and namespaces)."""
    return next((cls for text, cls in _REASON_CLASSES if text in reason), "other")


def quota_at(quotas: list[Quota], tenant_id: str, gpu_class: str, t_ms: int) -> float:
    """A tenant's guaranteed GPUs of a class at ``t_ms``: the latest quota in force, as domain/quota.py applies it."""
    q = quota_in_force([x for x in quotas if (x.tenant_id, x.gpu_class) == (tenant_id, gpu_class)], t_ms)
    return q.guaranteed_gpus if q else 0.0


def borrow_limit_at(quotas: list[Quota], tenant_id: str, gpu_class: str, t_ms: int) -> float | None:
    """The borrow limit of the quota in force at ``t_ms`` (None: no quota, or no limit)."""
    q = quota_in_force([x for x in quotas if (x.tenant_id, x.gpu_class) == (tenant_id, gpu_class)], t_ms)
    return q.borrow_limit_gpus if q else None


def _add(samples: Samples, name: str, labels: tuple[str, ...], value: float) -> None:
    family = samples.setdefault(name, {})
    family[labels] = family.get(labels, 0.0) + value


def read_fleet(reader: QueryPort, now_ms: int, window_ms: int = WINDOW_MS,
               idle_sm_active_ratio: float = IDLE_SM_ACTIVE_RATIO) -> tuple[int, Samples]:
    """The window's end and every fleet gauge's samples (family -> label values -> value)."""
    db = reader.db
    end = reader.query(q.evidence_end_sql(db))[1]
    evidence_end = int(end[0][0]) if end and end[0][0] is not None else now_ms
    t = min(now_ms, evidence_end)
    f = t - window_ms
    p = {"f": f, "t": t, "e": t - 1, "idle": idle_sm_active_ratio}
    out: Samples = {name: {} for name in FAMILIES}
    for cluster, reason, gpu_ms in reader.query(q.unattributed_sql(db), p)[1]:
        _add(out, "gpuledger_fleet_unattributed_gpus", (cluster, reason_class(reason)), gpu_ms / window_ms)
    for cluster, tenant, node, held_ms, idle_ms, unknown_ms in reader.query(q.allocated_holdings_sql(db), p)[1]:
        _add(out, "gpuledger_fleet_allocated_gpus", (cluster, tenant), held_ms / window_ms)
        _add(out, "gpuledger_fleet_idle_allocated_gpus", (cluster, tenant), idle_ms / window_ms)
        _add(out, "gpuledger_fleet_idle_allocated_node_gpus", (cluster, tenant, node), idle_ms / window_ms)
        _add(out, "gpuledger_fleet_unknown_activity_gpus", (cluster, tenant), unknown_ms / window_ms)
    dark_nodes: dict[str, float] = {}
    for cluster, node, dark, reporting in reader.query(q.dark_gpus_sql(db), p)[1]:
        _add(out, "gpuledger_fleet_gpus_without_telemetry", (cluster, node), dark if reporting else 0)
        dark_nodes[cluster] = dark_nodes.get(cluster, 0.0) + (0 if reporting else 1)
    for cluster, n in dark_nodes.items():
        _add(out, "gpuledger_fleet_nodes_without_telemetry", (cluster,), n)
    for cluster, reason, gpu_ms in reader.query(q.unavailable_sql(db), p)[1]:
        _add(out, "gpuledger_fleet_unavailable_gpus", (cluster, reason or "unavailable"), gpu_ms / window_ms)
    _requests(reader, p, out)
    _quotas(reader, p, out, window_ms)
    for cluster, node, kind, severity, n in reader.query(incidents_by_node_sql(db), {"from_ms": f, "to_ms": t})[1]:
        _add(out, "gpuledger_fleet_gpu_health_incidents", (cluster, node, kind, severity), n)
    for cluster, _gpu, _node, finding, _sources in reader.query(inventory_reconciliation_sql(db),
                                                                {"from_ms": f, "to_ms": t})[1]:
        _add(out, "gpuledger_fleet_inventory_mismatch_gpus", (cluster, finding), 1)
    return t, out


def _requests(reader: QueryPort, p: dict, out: Samples) -> None:
    rows = reader.query(q.request_latency_sql(reader.db), p)[1]
    for cluster, endpoint, n, failed, queue_q, ttft_q, with_queue, with_ttft in rows:
        _add(out, "gpuledger_fleet_requests", (cluster, endpoint), n)
        _add(out, "gpuledger_fleet_failed_requests", (cluster, endpoint), failed)
        for name, values, present in (("gpuledger_fleet_request_queue_seconds", queue_q, with_queue),
                                      ("gpuledger_fleet_request_ttft_seconds", ttft_q, with_ttft)):
            if present:
                for quantile, value in zip(QUANTILES, values):
                    _add(out, name, (cluster, endpoint, quantile), float(value))


def _quotas(reader: QueryPort, p: dict, out: Samples, window_ms: int) -> None:
    db, f, t, e = reader.db, p["f"], p["t"], p["e"]
    documents: dict[str, list[str]] = {}
    for cluster, _, _, doc in reader.query(q.quotas_sql(db), {"kind": "quotas"})[1]:
        documents.setdefault(cluster, []).append(doc)
    # the entries in force of every document (a refused one adds nothing: without any, no quotas)
    quotas = {cluster: in_force("quotas", docs).parsed for cluster, docs in documents.items()}
    held: dict[str, list[tuple[str, str, int, int, float]]] = {}
    for cluster, tenant, gpu_class, a, b, fraction in reader.query(q.held_sql(db), p)[1]:
        held.setdefault(cluster, []).append((tenant, gpu_class, int(a), int(b), float(fraction)))
    window_h = window_ms / 3_600_000
    for cluster, rows in held.items():
        split = split_by_quota(rows, quotas.get(cluster, []), f, t)
        for (tenant, gpu_class), (guaranteed_h, borrowed_h) in split.items():
            _add(out, "gpuledger_fleet_guaranteed_gpus", (cluster, tenant, gpu_class), guaranteed_h / window_h)
            _add(out, "gpuledger_fleet_borrowed_gpus", (cluster, tenant, gpu_class), borrowed_h / window_h)
            _add(out, "gpuledger_fleet_class_borrowed_gpus", (cluster, gpu_class), borrowed_h / window_h)
    guaranteed_by_class: dict[tuple[str, str], float] = {}
    for cluster, qs in quotas.items():
        for tenant, gpu_class in sorted({(x.tenant_id, x.gpu_class) for x in qs}):
            level = quota_at(qs, tenant, gpu_class, e)
            _add(out, "gpuledger_fleet_quota_gpus", (cluster, tenant, gpu_class), level)
            limit = borrow_limit_at(qs, tenant, gpu_class, e)
            if limit is not None:
                _add(out, "gpuledger_fleet_borrow_limit_gpus", (cluster, tenant, gpu_class), limit)
            guaranteed_by_class[(cluster, gpu_class)] = guaranteed_by_class.get((cluster, gpu_class), 0.0) + level
    for cluster, gpu_class, gpus, unavailable in reader.query(q.class_gpus_sql(db), p)[1]:
        _add(out, "gpuledger_fleet_class_gpus", (cluster, gpu_class), gpus)
        lendable = max(0.0, gpus - unavailable - guaranteed_by_class.get((cluster, gpu_class), 0.0))
        _add(out, "gpuledger_fleet_class_lendable_gpus", (cluster, gpu_class), lendable)
        out["gpuledger_fleet_class_borrowed_gpus"].setdefault((cluster, gpu_class), 0.0)


class FleetCollector(Collector):
    """Yields the latest refresh's samples; every family is listed even before the first refresh."""

    def __init__(self) -> None:
        self._samples: Samples = {name: {} for name in FAMILIES}
        self._lock = threading.Lock()

    def update(self, samples: Samples) -> None:
        with self._lock:
            self._samples = samples

    def collect(self):
        with self._lock:
            samples = self._samples
        for name, (doc, labels) in FAMILIES.items():
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            for values, value in sorted(samples.get(name, {}).items()):
                family.add_metric(list(values), value)
            yield family


class FleetExporter:
    """The fleet collector plus refresh bookkeeping on one registry; ``refresh`` runs the queries once."""

    def __init__(self, open_reader: Callable[[], QueryPort], window_ms: int = WINDOW_MS,
                 idle_sm_active_ratio: float = IDLE_SM_ACTIVE_RATIO, registry: CollectorRegistry | None = None) -> None:
        self.open_reader, self.window_ms, self.idle_ratio = open_reader, window_ms, idle_sm_active_ratio
        self.registry = r = registry or CollectorRegistry()
        self.collector = FleetCollector()
        r.register(self.collector)
        self.window_end = Gauge("gpuledger_fleet_window_end_timestamp_seconds",
                                "End of the window the fleet gauges describe (event time, unix seconds).", registry=r)
        self.last_refresh = Gauge("gpuledger_fleet_last_refresh_timestamp_seconds",
                                  "When the fleet gauges were last computed successfully (unix seconds).", registry=r)
        self.refresh_errors = Counter("gpuledger_fleet_refresh_errors_total",
                                      "Fleet refreshes that failed (ClickHouse unreachable or refused).", registry=r)

    def refresh(self, now_ms: int) -> bool:
        """Recompute every gauge as of ``now_ms``; False (and counted) when ClickHouse failed."""
        reader = None
        try:
            reader = self.open_reader()
            end_ms, samples = read_fleet(reader, now_ms, self.window_ms, self.idle_ratio)
        except StoreError:
            self.refresh_errors.inc()
            return False
        finally:
            close = getattr(reader, "close", None)
            if close is not None:
                close()  # the embedded engine is opened per refresh so the worker can own it between
        self.collector.update(samples)
        self.window_end.set(end_ms / 1000)
        self.last_refresh.set(time.time())
        return True

    def serve(self, port: int, addr: str = "127.0.0.1", token: str | None = None) -> int:
        """Serve /metrics on ``addr``:``port`` (0 = any free port) until ``close``; returns the port."""
        self._server = serve_metrics(self.registry, port, addr, token)
        return self._server.server_address[1]

    def close(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
            server.server_close()


def serve_fleet_metrics(settings: Settings, port: int, interval_s: float, stop: threading.Event | None = None,
                        progress: Callable[[str], None] = lambda _: None, window_s: float = WINDOW_MS / 1000,
                        idle_sm_active_ratio: float = IDLE_SM_ACTIVE_RATIO) -> int:
    """Serve the fleet gauges on ``port`` (0 = any free port), refreshed every ``interval_s``
    from the settings' ClickHouse (through a running worker when it owns the embedded engine),
    until ``stop`` is set. Returns 0."""
    from gpuledger.sinks.query import open_reader  # noqa: PLC0415 — opens the engine: only when serving

    exporter = FleetExporter(lambda: open_reader(settings.home, settings.effective_dsn()), int(window_s * 1000),
                             idle_sm_active_ratio)
    bound = exporter.serve(port, settings.metrics_addr, settings.metrics_secret())
    progress(f"metrics: fleet gauges at http://{settings.metrics_addr}:{bound}/metrics, every {interval_s:g}s")
    stop = stop or threading.Event()
    try:
        while not stop.is_set():
            if not exporter.refresh(int(time.time() * 1000)):
                progress("metrics: ClickHouse did not answer; the gauges keep their last values")
            stop.wait(interval_s)
    finally:
        exporter.close()
    return 0
