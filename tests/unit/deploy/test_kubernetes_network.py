"""deploy/kubernetes/networkpolicy.yaml: everything denied, then only the flows the pipeline needs.

The flows a pod needs are worked out from what its containers run (their command lines and
settings, as in test_kubernetes_manifests.py), not listed here: DNS for every pod; the Kafka
bootstrap's namespace and port for whatever talks to Kafka; the ClickHouse DSN's namespace
and port for whatever has one; the API server for the Kubernetes watch; the node's
dcgm-exporter for the DCGM producer. The policies must allow exactly those, each on its
ports only; ingress only to ports the pod declares, from pods in the cluster. Selectors are
matched as the API server matches them (matchLabels and matchExpressions).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from test_kubernetes_manifests import by_kind, process_of, workloads

ANY = "any destination"
DNS = ("kube-system", (("k8s-app", "kube-dns"),))


def matches(selector: dict, labels: dict) -> bool:
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def policies_for(workload: dict, kind: str) -> list[dict]:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    return [p for p in by_kind("NetworkPolicy").values()
            if kind in p["spec"]["policyTypes"] and matches(p["spec"]["podSelector"], labels)]


def egress_flows(workload: dict) -> set[tuple]:
    """(peer, port, protocol) the policies let the pods open; peer: (namespace, pod labels) or ANY."""
    flows = set()
    for p in policies_for(workload, "Egress"):
        for rule in p["spec"].get("egress", []):
            assert rule.get("ports"), f"{p['metadata']['name']}: egress to every port"
            peers = []
            for peer in rule.get("to") or [None]:
                if peer is None:
                    peers.append(ANY)
                    continue
                assert "ipBlock" not in peer, f"{p['metadata']['name']}: an ipBlock ({peer})"
                ns = peer["namespaceSelector"]
                assert set(ns) == {"matchLabels"} and set(ns["matchLabels"]) == {"kubernetes.io/metadata.name"}, (
                    f"{p['metadata']['name']}: a peer is one namespace by name: {peer}")
                pods = tuple(sorted(peer.get("podSelector", {}).get("matchLabels", {}).items()))
                peers.append((ns["matchLabels"]["kubernetes.io/metadata.name"], pods))
            flows |= {(peer, port["port"], port.get("protocol", "TCP")) for peer in peers for port in rule["ports"]}
    return flows


def service_namespace(host: str) -> str:
    """``name.namespace.svc[.cluster.local]`` -> namespace."""
    parts = host.split(".")
    assert len(parts) >= 3 and parts[2] == "svc", f"{host}: not a cluster Service address"
    return parts[1]


def needed_flows(workload: dict) -> set[tuple]:
    flows = {(DNS, 53, "UDP"), (DNS, 53, "TCP")}
    for c in workload["spec"]["template"]["spec"]["containers"]:
        proc = process_of(workload, c)
        s = proc.settings
        if proc.command in ("worker", "sink", "produce"):
            host, port = s.kafka_bootstrap.rsplit(":", 1)
            flows.add(((service_namespace(host), ()), int(port), "TCP"))
        if s.clickhouse_dsn:
            dsn = urlsplit(s.clickhouse_dsn)
            flows.add(((service_namespace(dsn.hostname), ()), dsn.port, "TCP"))
        if proc.source == "k8s":
            flows |= {(ANY, 443, "TCP"), (ANY, 6443, "TCP")}  # the API server is not a pod
        if proc.source == "dcgm":
            flows.add((ANY, urlsplit(s.dcgm_url).port, "TCP"))  # dcgm-exporter on the node's address
    return flows


def test_everything_is_denied_unless_a_policy_allows_it():
    deny = [p for p in by_kind("NetworkPolicy").values() if p["spec"]["podSelector"] == {}]
    assert len(deny) == 1, "one default-deny policy selecting every pod of the namespace"
    spec = deny[0]["spec"]
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    assert not spec.get("ingress") and not spec.get("egress")
    for w in workloads():
        assert policies_for(w, "Ingress") and policies_for(w, "Egress"), w["metadata"]["name"]


@pytest.mark.parametrize("workload", workloads(), ids=lambda w: w["metadata"]["name"])
def test_each_pod_may_open_exactly_the_connections_it_needs(workload):
    assert egress_flows(workload) == needed_flows(workload)


@pytest.mark.parametrize("workload", workloads(), ids=lambda w: w["metadata"]["name"])
def test_each_pod_accepts_only_its_declared_ports_from_pods_in_the_cluster(workload):
    declared = {(p["name"], p.get("protocol", "TCP")) for c in workload["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", [])}
    admitted = set()
    for p in policies_for(workload, "Ingress"):
        for rule in p["spec"].get("ingress", []):
            assert rule.get("ports"), f"{p['metadata']['name']}: ingress to every port"
            assert rule.get("from") and all(set(peer) == {"namespaceSelector"} for peer in rule["from"]), (
                f"{p['metadata']['name']}: ingress from outside the cluster's pods: {rule.get('from')}")
            admitted |= {(port["port"], port.get("protocol", "TCP")) for port in rule["ports"]}
    assert admitted == declared, f"{workload['metadata']['name']}: admitted {admitted}, declared {declared}"


def test_a_broader_policy_is_caught():
    sink = next(w for w in workloads() if w["metadata"]["name"] == "gpuledger-sink")
    wanted = needed_flows(sink)
    assert (("kafka", ()), 9092, "TCP") in wanted and (("clickhouse", ()), 8123, "TCP") in wanted
    assert (ANY, 443, "TCP") not in egress_flows(sink), "only the Kubernetes watch reaches the API server"
    assert matches({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "In", "values": ["x"]}]},
                   {"a": "1", "b": "x"})
    assert not matches({"matchExpressions": [{"key": "b", "operator": "In", "values": ["x"]}]}, {"b": "y"})


def test_metrics_listen_on_the_pod_address_where_prometheus_and_the_probes_reach_them():
    # The setting's default is 127.0.0.1; configmap.yaml opens /metrics to the pod network,
    # which the ingress policies above then narrow to the declared ports.
    for w in workloads():
        for c in w["spec"]["template"]["spec"]["containers"]:
            proc = process_of(w, c)
            if c.get("ports"):
                assert proc.settings.metrics_addr == "0.0.0.0", f"{w['metadata']['name']}/{c['name']}"
