"""The RBAC of deploy/kubernetes/, read statically: the watch producer's identity is granted
reading Pods and Namespaces and nothing else; the other pods get no API token and no rules.

That the real API server lets the producer list and watch under these rules, and refuses it
without them, is tested against a real kube-apiserver: tests/integration/test_kube_rbac.py.
"""

from __future__ import annotations

import yaml
from deploy_support import REPO

MANIFESTS = REPO / "deploy" / "kubernetes"
READ_VERBS = {"get", "list", "watch"}


def objects() -> list[dict]:
    return [d for f in sorted(MANIFESTS.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


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


def producer_service_account() -> tuple[str, str]:
    dep = next(o for o in objects() if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpuledger-k8s-producer")
    spec = dep["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken", True), "the watch producer needs its in-cluster token"
    return spec["serviceAccountName"], dep["metadata"]["namespace"]


def test_the_producer_is_granted_reading_pods_and_namespaces_across_the_cluster_and_nothing_more():
    account, ns = producer_service_account()
    cluster, local = rules_for(account, ns)
    assert not local, "the producer lists across the cluster: its rules must be bound cluster-wide"
    granted = {(g, r, v) for rule in cluster for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {("", r, v) for r in ("pods", "namespaces") for v in READ_VERBS}, granted


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
