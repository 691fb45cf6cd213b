"""``gpuledger produce SOURCE`` and ``gpuledger capture``: the live producers.

``produce`` runs one source's producer and publishes what it reads to the source topics, as
``ingest`` would publish the same lines from a capture (``--record DIR`` also writes them to
a capture). ``capture --out DIR --for DURATION`` records the configured live sources into a
capture directory, publishing nothing: ``gpuledger ingest DIR`` later gives the same facts.

Each producer's clock is corrected to the broker's (``producers/clock.py``) unless
``--no-clock-sync``; its metrics are served on ``--metrics-port``. SIGTERM or SIGINT stops it
after the current batch is flushed and its resume state saved.
"""

from __future__ import annotations

import re
import shlex
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from gpuledger.config import Settings

__all__ = ["SOURCES", "add_parsers"]

SOURCES = ("k8s", "podresources", "dcgm", "vgpu", "requests", "model-metrics")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


class UsageError(ValueError):
    pass


def parse_duration_s(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise UsageError(f"a duration is a number and a unit (ms, s, m, h), like 90s or 5m; got {text!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_producer(source: str, s: Settings, metrics, node: str):
    """The producer of one source, configured from the settings."""
    from gpuledger.producers.runtime import StateFile

    state_dir = s.home / "producers"
    if source == "k8s":
        from gpuledger.producers.k8s_watch import KubeWatchProducer, api_client_for

        return KubeWatchProducer(api_client_for(s.kube_api_url, s.kubeconfig), metrics,
                                 StateFile(state_dir / f"k8s-{s.cluster_id}.json"), s.watch_timeout_s)
    if source == "podresources":
        from gpuledger.producers.podresources_grpc import PodResourcesProducer

        return PodResourcesProducer(s.podresources_socket, node, s.scrape_interval_s, metrics)
    if source == "dcgm":
        from gpuledger.producers.dcgm_scrape import DcgmScrapeProducer

        return DcgmScrapeProducer(s.dcgm_url, node, s.scrape_interval_s, metrics)
    if source == "vgpu":
        from gpuledger.producers.vgpu_smi import VgpuProducer

        return VgpuProducer(node, shlex.split(s.vgpu_command), shlex.split(s.vgpu_gpus_command), s.vgpu_owners,
                            s.scrape_interval_s, metrics)
    if source == "requests":
        return _RequestSources(s, metrics, state_dir)
    if source == "model-metrics":
        from gpuledger.producers.model_scrape import ModelScrapeProducer

        if not s.model_metrics_url or not s.model_endpoint_id:
            raise UsageError("model-metrics: set the model server's /metrics URL and the endpoint it serves "
                             "(--model-url URL --endpoint ID, or GPULEDGER_MODEL_METRICS_URL and "
                             "GPULEDGER_MODEL_ENDPOINT_ID)")
        try:
            return ModelScrapeProducer(s.model_metrics_url, s.model_endpoint_id, s.scrape_interval_s, metrics,
                                       s.model_runtime, s.model_pod, s.model_revision)
        except ValueError as exc:
            raise UsageError(f"model-metrics: {exc}") from exc
    raise UsageError(f"unknown source {source!r}: one of {', '.join(SOURCES)}")


class _RequestSources:
    """Request events: the access log tailer and/or the HTTP receiver, and the vLLM check."""

    source = "requests"

    def __init__(self, s: Settings, metrics, state_dir: Path) -> None:
        from gpuledger.producers.requests_events import RequestHttpReceiver, RequestLogProducer
        from gpuledger.producers.runtime import ProducerMetrics, StateFile

        self.parts = []
        if s.requests_log is not None:
            self.parts.append(RequestLogProducer(s.requests_log, metrics,
                                                 StateFile(state_dir / f"requests-{s.requests_log.name}.json")))
        if s.requests_listen:
            from gpuledger.producers.request_auth import ReportersFile

            if s.requests_reporters is None:
                raise UsageError("requests: the HTTP receiver needs its reporters document (who may report for "
                                 "which tenants and endpoints): set GPULEDGER_REQUESTS_REPORTERS (--reporters FILE)")
            try:
                reporters = ReportersFile(s.requests_reporters, lambda m: print(m, file=sys.stderr, flush=True))
            except ValueError as exc:
                raise UsageError(f"requests: {exc}") from exc
            self.parts.append(RequestHttpReceiver(s.requests_listen, metrics, reporters))
        if not self.parts:
            raise UsageError("requests: set GPULEDGER_REQUESTS_LOG (--log FILE) and/or "
                             "GPULEDGER_REQUESTS_LISTEN (--listen HOST:PORT)")
        self.vllm = None
        if s.vllm_url:
            from gpuledger.producers.vllm_drift import VllmDriftMonitor

            self.vllm = VllmDriftMonitor(s.vllm_url, s.scrape_interval_s, ProducerMetrics("vllm", metrics.registry))

    def run(self, sink, stop, now_ms) -> None:
        if self.vllm is not None:
            sink = self.vllm.watching(sink)
            threads = [threading.Thread(target=self.vllm.run, args=(sink, stop, now_ms), daemon=True)]
        else:
            threads = []
        threads += [threading.Thread(target=p.run, args=(sink, stop, now_ms), daemon=True) for p in self.parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def _clock(s: Settings, node: str, metrics: list, topics):
    """This host's clock, corrected to the broker's unless clock sync is off: (the BrokerClock
    to close, or None; the now_ms function every producer of the process stamps with)."""
    from gpuledger.bus.security import client_config
    from gpuledger.producers.clock import BrokerClock, local_ms

    skew_ms = int(round(s.failpoint_clock_skew_s * 1000)) if s.failpoint_clock_skew_s else 0

    def host_ms() -> int:
        return local_ms() + skew_ms
    if not s.clock_sync:
        return None, host_ms

    def reading(r) -> None:
        for m in metrics:
            m.clock_offset.labels(m.source).set(r.offset_ms / 1000)

    clock = BrokerClock(s.kafka_bootstrap, topics.clock.name, node, "+".join(m.source for m in metrics),
                        local=host_ms, on_reading=reading, client=client_config(s))
    try:
        clock.start()
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"cannot measure the clock against the broker at {s.kafka_bootstrap} ({exc}); "
                         "is it up (`gpuledger stack up`)? --no-clock-sync uses this host's clock as it is") from exc
    return clock, clock.now_ms


def run_producers(s: Settings, sources: list[str], sink, deadline, progress=_progress,
                  on_clock=lambda now_ms: None) -> None:
    """Run the producers of ``sources`` into ``sink`` until ``deadline`` is set, then flush.
    ``on_clock`` is given the process's clock (the broker's, where it is measured) before any poll."""
    from prometheus_client import CollectorRegistry

    from gpuledger.producers.runtime import ProducerMetrics
    from gpuledger.bus.topics import topics_for

    node = s.node_name or socket.gethostname()
    registry = CollectorRegistry()
    metrics = {src: ProducerMetrics(src, registry) for src in sources}
    producers = {src: build_producer(src, s, metrics[src], node) for src in sources}
    if s.producer_metrics_port >= 0:
        port = metrics[sources[0]].serve(s.producer_metrics_port, s.metrics_addr, s.metrics_secret())
        shown = "127.0.0.1" if s.metrics_addr in ("0.0.0.0", "::") else s.metrics_addr
        progress(f"produce: metrics at http://{shown}:{port}/metrics")
    clock, now_ms = _clock(s, node, list(metrics.values()), topics_for(s))
    on_clock(now_ms)
    threads = [threading.Thread(target=producer.run, args=(sink, deadline, now_ms), name=f"produce-{src}", daemon=True)
               for src, producer in producers.items()]
    if getattr(deadline, "for_s", None):
        deadline.until_ms = int(now_ms() + deadline.for_s * 1000)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: deadline.set())
    for t in threads:
        t.start()
    progress(f"produce: {', '.join(sources)} running on {node} for cluster {s.cluster_id}")
    while any(t.is_alive() for t in threads):
        if deadline.until_ms is not None and now_ms() >= deadline.until_ms + 1000 * s.scrape_interval_s:
            deadline.set()
        for t in threads:
            t.join(0.2)
    sink.flush()
    if clock is not None:
        clock.close()


def _deadline(args, s: Settings):
    from gpuledger.domain.timeutil import parse_rfc3339_ms
    from gpuledger.producers.runtime import Deadline

    from_ms = until_ms = None
    try:
        if getattr(args, "from_", None):
            from_ms = parse_rfc3339_ms(args.from_)
        if getattr(args, "until", None):
            until_ms = parse_rfc3339_ms(args.until)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    deadline = Deadline(from_ms, until_ms)
    deadline.for_s = parse_duration_s(args.for_) if getattr(args, "for_", None) else None
    return deadline


def cmd_produce(s: Settings, args) -> int:
    from gpuledger.bus.publisher import KafkaPublisher
    from gpuledger.bus.security import client_config
    from gpuledger.producers.lines import CaptureSink, PublishSink, TeeSink
    from gpuledger.bus.topics import ensure_topics, topics_for

    if not s.cluster_id:
        raise UsageError("set the cluster: --cluster ID or GPULEDGER_CLUSTER_ID")
    topics = topics_for(s)
    ensure_topics(s.kafka_bootstrap, topics, client=client_config(s))
    # the publisher's clock (ingested_at, the event-time bound): the broker's once measured
    clock = {"now_ms": lambda: time.time_ns() // 1_000_000}
    publisher = KafkaPublisher(s.kafka_bootstrap, client=client_config(s))
    sink = PublishSink(publisher, topics, s.cluster_id, lambda: clock["now_ms"](),
                       source=f"live-{args.source}", max_future_ms=int(s.max_future_skew_s * 1000))
    if args.record:
        sink = TeeSink(sink, CaptureSink(Path(args.record), s.cluster_id))
    run_producers(s, [args.source], sink, _deadline(args, s), on_clock=lambda now_ms: clock.update(now_ms=now_ms))
    return 0


def cmd_capture(s: Settings, args) -> int:
    from gpuledger.producers.lines import CaptureSink

    if not s.cluster_id:
        raise UsageError("set the cluster: --cluster ID or GPULEDGER_CLUSTER_ID")
    sources = [x.strip() for x in args.sources.split(",") if x.strip()]
    unknown = [x for x in sources if x not in SOURCES]
    if unknown or not sources:
        raise UsageError(f"--sources: unknown {', '.join(unknown) or '(none given)'}; use a list of {', '.join(SOURCES)}")
    sink = CaptureSink(Path(args.out), s.cluster_id)
    run_producers(s, sources, sink, _deadline(args, s))
    sink.close()
    for file, n in sorted(sink.lines.items()):
        print(f"{file:<24}{n:>8} lines")
    _progress(f"capture: recorded into {args.out}; `gpuledger ingest {args.out}` publishes it")
    return 0


def _overrides(args) -> dict:
    keys = {"cluster": "cluster_id", "node": "node_name", "interval": "scrape_interval_s",
            "metrics_port": "producer_metrics_port", "kube_api": "kube_api_url", "kubeconfig": "kubeconfig",
            "socket": "podresources_socket", "dcgm_url": "dcgm_url", "vgpu_command": "vgpu_command",
            "gpus_command": "vgpu_gpus_command", "owners": "vgpu_owners", "log": "requests_log",
            "listen": "requests_listen", "reporters": "requests_reporters", "vllm_url": "vllm_url",
            "model_url": "model_metrics_url", "endpoint": "model_endpoint_id", "runtime": "model_runtime",
            "pod": "model_pod", "revision": "model_revision"}
    out = {setting: getattr(args, flag) for flag, setting in keys.items() if getattr(args, flag, None) is not None}
    if getattr(args, "no_clock_sync", False):
        out["clock_sync"] = False
    return out


def _source_flags(p) -> None:
    p.add_argument("--cluster", help="cluster id (GPULEDGER_CLUSTER_ID)")
    p.add_argument("--node", help="this node's name (GPULEDGER_NODE_NAME, default the host name)")
    p.add_argument("--interval", type=float, help="seconds between polls (GPULEDGER_SCRAPE_INTERVAL_S, default 10)")
    p.add_argument("--metrics-port", type=int, help="serve /metrics here (0 = any free port)")
    p.add_argument("--kube-api", help="Kubernetes API URL (default kubeconfig, then in-cluster)")
    p.add_argument("--kubeconfig", type=Path)
    p.add_argument("--socket", type=Path, help="kubelet PodResources socket")
    p.add_argument("--dcgm-url", help="dcgm-exporter /metrics URL")
    p.add_argument("--vgpu-command", help="default: nvidia-smi vgpu -q")
    p.add_argument("--gpus-command", help="default: nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader")
    p.add_argument("--owners", type=Path, help="VM -> owner mapping file (vGPU)")
    p.add_argument("--log", type=Path, help="JSONL access log to tail (requests)")
    p.add_argument("--listen", help="HOST:PORT to accept request events over HTTP (requests)")
    p.add_argument("--reporters", type=Path, help="reporters document: who may POST request events, for whom")
    p.add_argument("--vllm-url", help="vLLM /metrics URL to check request totals against")
    p.add_argument("--model-url", help="a model server's /metrics URL: vLLM, Triton or NIM (model-metrics)")
    p.add_argument("--endpoint", help="the endpoint the model server serves (model-metrics)")
    p.add_argument("--runtime", choices=("vllm", "triton", "nim"), help="the model server (model-metrics)")
    p.add_argument("--pod", help="the model server's pod (model-metrics)")
    p.add_argument("--revision", help="the revision it serves, when its labels do not say (model-metrics)")
    p.add_argument("--no-clock-sync", action="store_true", help="stamp with this host's clock, uncorrected")
    p.add_argument("--from", dest="from_", help="first poll at or after this instant (RFC 3339)")
    p.add_argument("--until", help="stop polling at this instant (RFC 3339)")
    p.set_defaults(overrides=_overrides)


def add_parsers(sub) -> None:
    pd = sub.add_parser("produce", help="run a live producer: read a source, publish to the source topics")
    pd.add_argument("source", choices=SOURCES)
    pd.add_argument("--record", help="also record what is published into this capture directory")
    pd.add_argument("--for", dest="for_", help="stop after this long (e.g. 10m); default: until SIGTERM")
    _source_flags(pd)
    pd.set_defaults(func=cmd_produce)
    cp = sub.add_parser("capture", help="record live sources into a capture directory (ingest publishes it)")
    cp.add_argument("--out", required=True, help="capture directory (created; appended to if it exists)")
    cp.add_argument("--for", dest="for_", required=True, help="how long to record, e.g. 90s, 15m, 2h")
    cp.add_argument("--sources", default="k8s,podresources,dcgm",
                    help=f"comma-separated, of {', '.join(SOURCES)} (default k8s,podresources,dcgm)")
    _source_flags(cp)
    cp.set_defaults(func=cmd_capture)
