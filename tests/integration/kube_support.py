"""Running the Kubernetes watch producer against the real API server, and reading what it sent."""

from __future__ import annotations

import functools
from pathlib import Path

from gpuledger.producers.k8s_watch import FILE, KubeWatchProducer, api_client_for
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import ProducerMetrics, StateFile
from sources.harness import FIXED_MS as NOW_MS, Running, errors, fixed_ms, metric, wait_for as _wait_for

__all__ = ["ANY", "FILE", "NOW_MS", "WAIT_S", "deletion", "errors", "ev", "events", "metric", "objects", "producer",
           "running", "wait_for"]

WAIT_S = 30  # a real API server on a shared 2-core machine: more than the unit tests allow
wait_for = functools.partial(_wait_for, timeout_s=WAIT_S, interval_s=0.05)


def producer(kubeconfig: Path, state: StateFile | None, **kwargs) -> KubeWatchProducer:
    return KubeWatchProducer(api_client_for(kubeconfig=kubeconfig), ProducerMetrics("k8s"), state,
                             watch_timeout_s=kwargs.pop("watch_timeout_s", 30), commit_interval_s=0.05, **kwargs)


def running(prod: KubeWatchProducer, sink: MemorySink) -> Running:
    """The producer on a thread, its clock standing at NOW_MS; ``.thread`` is the thread."""
    return Running(prod, sink, fixed_ms, WAIT_S)


def _ns(obj: dict) -> str:
    meta = obj["metadata"]
    return meta["name"] if obj["kind"] == "Namespace" else meta.get("namespace", "")


def events(sink: MemorySink, namespaces: set[str], kind: str | None = None) -> list[tuple[str, str, str]]:
    """(type, uid, resourceVersion) of every non-BOOKMARK line about ``namespaces`` (the
    Namespaces themselves and the Pods in them), optionally of one kind."""
    out = []
    for line in sink.of(FILE):
        event = line["event"]
        obj = event["object"]
        if event["type"] != "BOOKMARK" and _ns(obj) in namespaces and kind in (None, obj["kind"]):
            out.append((event["type"], obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]))
    return out


def objects(sink: MemorySink, namespaces: set[str], kind: str | None = None) -> list[dict]:
    """The objects of the lines ``events`` returns, in the same order."""
    return [line["event"]["object"] for line in sink.of(FILE) if line["event"]["type"] != "BOOKMARK"
            and _ns(line["event"]["object"]) in namespaces and kind in (None, line["event"]["object"]["kind"])]


def ev(event_type: str, obj: dict) -> tuple[str, str, str]:
    return event_type, obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


class _Any:
    """Equal to any resourceVersion: for a write whose resourceVersion the API server does not return."""

    def __eq__(self, other) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()


def deletion(deleted: dict) -> list[tuple]:
    """The events of a Pod deleted by ``KubeCluster.delete``: a bound pod is first marked (MODIFIED,
    with its deletionTimestamp), then removed (DELETED); only the second is the answer's."""
    uid = deleted["metadata"]["uid"]
    return [("MODIFIED", uid, ANY), ev("DELETED", deleted)]
