"""deploy/kubernetes/rbac.yaml on a real kube-apiserver (RBAC authorizer): the watch producer runs
under the ServiceAccount it binds; an identity without the binding is refused (403), and the
producer says why and keeps retrying until the binding exists."""

from __future__ import annotations

import pytest
from kube_support import errors, events, producer, running, wait_for
from sources.real_apiserver import REPO

from gpuledger.producers.lines import MemorySink

pytestmark = pytest.mark.integration
MANIFESTS = REPO / "deploy" / "kubernetes"
NS, WATCHER, UNBOUND = "gpuledger", "gpuledger-k8s-watch", "gpuledger"
ROLE = "gpuledger-k8s-watch"


@pytest.fixture(scope="module")
def rbac(kube):
    """namespace.yaml and rbac.yaml applied as they are, and a workload namespace with a pod."""
    done = kube.kubectl("apply", "-f", f"{MANIFESTS}/namespace.yaml", "-f", f"{MANIFESTS}/rbac.yaml")
    assert done.returncode == 0, done.stderr
    kube.namespace("ml-serving")
    kube.pod("ml-serving", "llm-serve-a")
    return kube


def can_i(kube, token: str, *args: str) -> bool:
    answer = kube.kubectl("auth", "can-i", *args, token=token)
    assert answer.stdout.strip() in ("yes", "no"), answer.stderr
    return answer.stdout.strip() == "yes"


def test_the_producer_lists_and_watches_under_its_service_account(rbac):
    kube = rbac
    config = kube.kubeconfig(kube.token(NS, WATCHER), "watcher")
    prod, sink = producer(config, None), MemorySink()
    with running(prod, sink):
        wait_for(lambda: len(events(sink, {"ml-serving"})) == 2, "the namespace and its pod")
        later = kube.pod("ml-serving", "llm-serve-b")
        wait_for(lambda: ("ADDED", later["metadata"]["uid"], later["metadata"]["resourceVersion"])
                 in events(sink, {"ml-serving"}), "a watched pod")
    assert errors(prod.metrics, "api") == 0


def test_the_service_account_may_read_pods_and_namespaces_and_nothing_more(rbac):
    kube = rbac
    token = kube.token(NS, WATCHER)
    for verb in ("get", "list", "watch"):
        assert can_i(kube, token, verb, "pods", "--all-namespaces")
        assert can_i(kube, token, verb, "namespaces")
    for refused in (("create", "pods", "-n", "ml-serving"), ("delete", "pods", "-n", "ml-serving"),
                    ("patch", "pods/status", "-n", "ml-serving"), ("get", "secrets", "-n", NS),
                    ("list", "nodes"), ("create", "pods/eviction", "-n", "ml-serving"), ("update", "namespaces"),
                    ("list", "configmaps", "--all-namespaces")):
        assert not can_i(kube, token, *refused), refused


def test_an_identity_without_the_cluster_binding_is_refused_and_the_producer_keeps_retrying(rbac, capfd):
    kube = rbac
    config = kube.kubeconfig(kube.token(NS, UNBOUND), "unbound")
    prod, sink = producer(config, None), MemorySink()
    with running(prod, sink) as run:
        wait_for(lambda: errors(prod.metrics, "api") >= 3, "refusals")
        # the same rules bound in one namespace do not allow listing across the cluster
        kube.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", binding(
            "RoleBinding", "unbound-local"))
        refused = errors(prod.metrics, "api")
        wait_for(lambda: errors(prod.metrics, "api") >= refused + 2, "refusals with a namespaced binding")
        assert run.thread.is_alive() and not sink.lines
        kube.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding(
            "ClusterRoleBinding", "unbound-cluster"))
        wait_for(lambda: len(events(sink, {"ml-serving"})) >= 2, "the list once bound", timeout_s=60)
    err = capfd.readouterr().err
    assert "HTTP 403 Forbidden" in err, err[-2000:]
    assert f'User "system:serviceaccount:{NS}:{UNBOUND}" cannot list resource "namespaces"' in err, err[-2000:]
    assert "rbac.yaml" in err and "retrying in" in err
    assert "HTTP response headers" not in err  # one line per refusal, not the client's dump
    kube.call("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/unbound-cluster")


def test_a_token_the_server_does_not_know_is_401(rbac, capfd):
    kube = rbac
    prod, sink = producer(kube.kubeconfig("not-a-token", "stranger"), None), MemorySink()
    with running(prod, sink):
        wait_for(lambda: errors(prod.metrics, "api") >= 2, "refusals")
    err = capfd.readouterr().err
    assert "HTTP 401 Unauthorized" in err and "does not accept the credentials" in err, err[-2000:]
    assert not sink.lines


def binding(kind: str, name: str) -> dict:
    meta = {"name": name, **({"namespace": NS} if kind == "RoleBinding" else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": UNBOUND, "namespace": NS}]}
