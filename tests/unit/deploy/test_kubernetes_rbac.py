"""The RBAC of deploy/kubernetes/ covers what the Kubernetes watch producer really asks for.

The real producer (``producers/k8s_watch.py``) lists and watches a small API server that
speaks the list/watch protocol (``tests/sources/kube_apiserver.py``); every request it sends
is turned into the attributes the API server authorizes (verb, API group, resource,
namespace) and checked against the rules bound to the ServiceAccount of the
gpuledger-k8s-producer Deployment, with the API server's RBAC semantics: a request across all
namespaces needs a ClusterRole bound by a ClusterRoleBinding. The rules grant nothing beyond
reading what the producer reads.
"""

from __future__ import annotations

import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from deploy_support import REPO
from sources.kube_apiserver import KubeApiServer, namespace, pod

from gpuledger.producers.k8s_watch import KubeWatchProducer, api_client_for
from gpuledger.producers.lines import MemorySink
from gpuledger.producers.runtime import ProducerMetrics

MANIFESTS = REPO / "deploy" / "kubernetes"
READ_VERBS = {"get", "list", "watch"}
WAIT_S = 20


def objects() -> list[dict]:
    return [d for f in sorted(MANIFESTS.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


def request_attributes(path_and_query: str) -> tuple[str, str, str, str | None]:
    """(verb, apiGroup, resource, namespace) of a resource request, as the API server derives them."""
    url = urlsplit(path_and_query)
    parts = [p for p in url.path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    ns = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        ns, rest = rest[1], rest[2:]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
    watching = parse_qs(url.query).get("watch", [""])[-1] in ("true", "1")
    verb = "watch" if watching else ("get" if name else "list")
    return verb, group, resource, ns


def rules_for(service_account: str, ns: str) -> tuple[list[dict], list[dict]]:
    """(cluster-wide rules, rules in ``ns``) bound to the ServiceAccount."""
    objs = objects()
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objs
             if o["kind"] in ("ClusterRole", "Role")}
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": ns}
    cluster, local = [], []
    for b in objs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding") or subject not in b.get("subjects", []):
            continue
        ref = b["roleRef"]
        role_ns = None if ref["kind"] == "ClusterRole" else b["metadata"]["namespace"]
        role = roles[(ref["kind"], role_ns, ref["name"])]
        (cluster if b["kind"] == "ClusterRoleBinding" else local).extend(role.get("rules", []))
    return cluster, local


def allows(rules: list[dict], verb: str, group: str, resource: str) -> bool:
    return any((group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
               and (resource in r.get("resources", []) or "*" in r.get("resources", []))
               and (verb in r.get("verbs", []) or "*" in r.get("verbs", [])) for r in rules)


def authorized(attrs: tuple[str, str, str, str | None], cluster: list[dict], local: list[dict], ns: str) -> bool:
    verb, group, resource, req_ns = attrs
    if allows(cluster, verb, group, resource):
        return True
    return req_ns == ns and allows(local, verb, group, resource)


def producer_service_account() -> tuple[str, str]:
    dep = next(o for o in objects() if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpuledger-k8s-producer")
    spec = dep["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken", True), "the watch producer needs its in-cluster token"
    return spec["serviceAccountName"], dep["metadata"]["namespace"]


@pytest.fixture(scope="module")
def producer_requests() -> list[str]:
    """Every request the real watch producer sends while it lists and then watches."""
    with KubeApiServer(bookmark_interval_s=0.1) as server:
        server.add(namespace("ml-serving", "search"))
        server.add(pod("llm-serve-a", "ml-serving"))
        prod = KubeWatchProducer(api_client_for(server.url), ProducerMetrics("k8s"), None,
                                 watch_timeout_s=30, commit_interval_s=0.05)
        stop = threading.Event()
        thread = threading.Thread(target=prod.run, args=(MemorySink(), stop, lambda: 1_790_000_000_000), daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while not (server.watchers("Pod") and server.watchers("Namespace")):
                assert time.monotonic() < deadline, f"the producer did not start watching: {server.requests}"
                time.sleep(0.02)
            server.add(pod("llm-serve-b", "ml-serving"))
        finally:
            stop.set()
            thread.join(WAIT_S)
        return list(server.requests)


def test_the_producer_lists_and_watches_pods_and_namespaces_across_the_cluster(producer_requests):
    attrs = {request_attributes(r) for r in producer_requests}
    assert attrs >= {("list", "", "pods", None), ("watch", "", "pods", None),
                     ("list", "", "namespaces", None), ("watch", "", "namespaces", None)}, attrs


def test_every_request_of_the_producer_is_authorized_for_its_service_account(producer_requests):
    account, ns = producer_service_account()
    cluster, local = rules_for(account, ns)
    denied = sorted({request_attributes(r) for r in producer_requests}
                    - {a for a in map(request_attributes, producer_requests) if authorized(a, cluster, local, ns)})
    assert not denied, f"ServiceAccount {ns}/{account} may not: {denied}"


def test_the_rules_grant_only_reading_what_the_producer_reads(producer_requests):
    account, ns = producer_service_account()
    cluster, local = rules_for(account, ns)
    used = {(group, resource) for _, group, resource, _ in map(request_attributes, producer_requests)}
    for rule in cluster + local:
        assert set(rule["verbs"]) <= READ_VERBS, f"write or wildcard verbs granted: {rule}"
        granted = {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
        assert granted <= used, f"granted beyond what the producer reads: {sorted(granted - used)}"


def test_a_binding_that_misses_the_watch_verb_is_caught(producer_requests):
    account, ns = producer_service_account()
    cluster, local = rules_for(account, ns)
    without_watch = [{**r, "verbs": [v for v in r["verbs"] if v != "watch"]} for r in cluster]
    assert not all(authorized(request_attributes(r), without_watch, local, ns) for r in producer_requests)
    namespaced_only = ([], cluster)  # the same rules in a RoleBinding: all-namespace lists are refused
    assert not all(authorized(request_attributes(r), *namespaced_only, ns) for r in producer_requests)


def test_the_workers_and_the_sink_get_no_api_token_and_no_rules():
    """Processing talks to Kafka and ClickHouse only: its pods carry no API token, and their
    ServiceAccount is bound to nothing."""
    objs = objects()
    accounts = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceAccount"}
    for name in ("gpuledger-worker", "gpuledger-sink"):
        dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
        spec = dep["spec"]["template"]["spec"]
        account, ns = spec["serviceAccountName"], dep["metadata"]["namespace"]
        assert spec.get("automountServiceAccountToken") is False, f"{name} mounts an API token"
        assert accounts[account].get("automountServiceAccountToken") is False, account
        assert rules_for(account, ns) == ([], []), f"{name} runs as {account}, which is bound to rules"
        assert account != producer_service_account()[0], f"{name} shares the watch producer's identity"
