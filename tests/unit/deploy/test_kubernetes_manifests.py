"""deploy/kubernetes/ against the Kubernetes OpenAPI schemas and against gpuledger itself.

Every object is validated, offline, against the JSON schemas generated from the Kubernetes
OpenAPI definitions that the kubernetes-validate package bundles, in their strict form
(unknown fields rejected), for the oldest and newest Kubernetes minor we deploy to. Beyond the
schemas: every container runs the one gpuledger image with a command line gpuledger's parser
accepts and an environment (ConfigMap, Secret, downward API, ``$(VAR)`` expansion as the
kubelet does it) its settings accept; the node producers read the kubelet socket and the
node's dcgm-exporter; selectors, Services and ports fit together; every container is locked
down; the attribution workers scale with replicas (up to the source partition count) and get
no ClickHouse login, the sink writes the ClickHouse server, and neither is reachable from
outside the cluster. The RBAC test is in test_kubernetes_rbac.py.
"""

from __future__ import annotations

import copy
import re
import socket
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from deploy_support import REPO, SERVES_NO_METRICS, check_role, gpuledger_process

MANIFESTS = REPO / "deploy" / "kubernetes"
KUBERNETES_VERSIONS = ("1.33.0", "1.37.0")
IMAGE = "gpuledger"
NODE_NAME, NODE_IP = "gpu-node-a1", "10.0.0.7"
DOWNWARD = {"spec.nodeName": NODE_NAME, "status.hostIP": NODE_IP, "metadata.name": "pod-0",
            "metadata.namespace": "gpuledger", "status.podIP": "10.1.0.9"}
KUBELET_PODRESOURCES_DIR = Path("/var/lib/kubelet/pod-resources")
ROOT_CONTAINERS = {("gpuledger-node-producers", "podresources")}  # connects to the kubelet's root-owned socket
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet"}


def manifest_files() -> list[Path]:
    return sorted(p for p in MANIFESTS.glob("*.y*ml") if p.name != "kustomization.yaml")


def objects() -> list[dict]:
    """The manifests' objects and the Secrets the kustomization generates."""
    return [doc for f in manifest_files() for doc in yaml.safe_load_all(f.read_text()) if doc] + generated_secrets()


def generated_secrets() -> list[dict]:
    """The kustomization's secretGenerator, from the committed ``<envs file>.example`` (the real
    file is never in the repository; kustomize refuses to build without it)."""
    k = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    out = []
    for gen in k.get("secretGenerator", []):
        data = {}
        for name in gen.get("envs", []):
            lines = (MANIFESTS / f"{name}.example").read_text().splitlines()
            data.update(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "stringData": data,
                    "metadata": {"name": gen["name"], "namespace": k["namespace"],
                                 "labels": gen.get("options", {}).get("labels", {})}})
    return out


def by_kind(kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects() if o["kind"] == kind}


def schema_problems(obj: dict, version: str) -> list[str]:
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')} (Kubernetes {version})"
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{where}: {'.'.join(map(str, exc.path)) or '(top)'}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"{where}: no schema: {exc.message}"]
    return []


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test: the schemas must come from disk."""
    def refuse(self, address):
        raise AssertionError(f"schema validation tried to reach {address}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(None, address))


# -- the Kubernetes OpenAPI schemas -------------------------------------------------------
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version, no_network):
    objs = objects()
    assert len(objs) >= 10, f"only {len(objs)} objects in {MANIFESTS}"
    problems = [p for o in objs for p in schema_problems(o, version)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("mistake, change", [
    ("misspelt container field", lambda c: c.update(imagePullPolcy="Always")),
    ("wrong type", lambda c: c["ports"][0].update(containerPort="9464")),
    ("misspelt probe field", lambda c: c["livenessProbe"].update(periodSecond=30)),
    ("missing required field", lambda c: c.pop("name")),
    ("misspelt securityContext field", lambda c: c["securityContext"].update(readOnlyRootFilesytem=True)),
])
def test_the_schema_check_rejects_mistakes(mistake, change, no_network):
    ds = copy.deepcopy(by_kind("DaemonSet")["gpuledger-node-producers"])
    change(ds["spec"]["template"]["spec"]["containers"][0])
    assert schema_problems(ds, KUBERNETES_VERSIONS[-1]), f"a {mistake} passed the schema check"


def test_kustomization_lists_every_manifest_once():
    k = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert k["kind"] == "Kustomization"
    assert sorted(k["resources"]) == sorted(p.name for p in manifest_files())
    assert [g["name"] for g in k.get("secretGenerator", [])] == ["gpuledger-clickhouse"]
    assert len(set(k["resources"])) == len(k["resources"])
    assert [i["name"] for i in k.get("images", [])] == [IMAGE]
    names = [o["metadata"]["name"] for o in objects() if o["kind"] == "Namespace"]
    assert names == [k["namespace"]]


def test_the_expected_objects_are_there_in_one_namespace():
    have = {(o["kind"], o["metadata"]["name"]) for o in objects()}
    want = {("Namespace", "gpuledger"), ("ServiceAccount", "gpuledger-k8s-watch"),
            ("ClusterRole", "gpuledger-k8s-watch"), ("ClusterRoleBinding", "gpuledger-k8s-watch"),
            ("ConfigMap", "gpuledger-config"), ("DaemonSet", "gpuledger-node-producers"),
            ("Deployment", "gpuledger-worker"), ("Deployment", "gpuledger-sink"),
            ("NetworkPolicy", "gpuledger-worker"), ("NetworkPolicy", "gpuledger-sink"),
            ("Deployment", "gpuledger-k8s-producer"),
            ("Deployment", "gpuledger-requests-producer"), ("Deployment", "gpuledger-fleet-metrics"),
            ("Service", "gpuledger-requests")}
    assert want <= have, f"missing: {sorted(want - have)}"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for o in objects():
        if o["kind"] not in cluster_scoped:
            assert o["metadata"].get("namespace") == "gpuledger", f"{o['kind']}/{o['metadata']['name']}"


# -- containers as gpuledger processes ----------------------------------------------------
def workloads() -> list[dict]:
    return [o for o in objects() if o["kind"] in WORKLOAD_KINDS]


def containers():
    for w in workloads():
        for c in w["spec"]["template"]["spec"]["containers"]:
            yield w, c


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: defined variables only, ``$$`` escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def container_env(workload: dict, container: dict) -> dict[str, str]:
    """The environment the kubelet gives the container, with the downward API at sample values."""
    where = f"{workload['metadata']['name']}/{container['name']}"
    maps = {n: o.get("data", {}) for n, o in by_kind("ConfigMap").items()}
    secrets = {n: o.get("stringData", {}) for n, o in by_kind("Secret").items()}
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        ref = src.get("configMapRef") or src.get("secretRef")
        pool = maps if "configMapRef" in src else secrets
        assert ref["name"] in pool, f"{where}: envFrom names {ref['name']}, which is not in {MANIFESTS}"
        env.update(pool[ref["name"]])
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        elif "fieldRef" in e.get("valueFrom", {}):
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in DOWNWARD, f"{where}: {e['name']} from {path}, not a field this check knows"
            env[e["name"]] = DOWNWARD[path]
        else:
            ref = e["valueFrom"].get("secretKeyRef") or e["valueFrom"]["configMapKeyRef"]
            pool = secrets if "secretKeyRef" in e["valueFrom"] else maps
            env[e["name"]] = pool[ref["name"]][ref["key"]]
    return env


def process_of(workload: dict, container: dict):
    where = f"{workload['kind']} {workload['metadata']['name']}, container {container['name']}"
    return gpuledger_process(container.get("args"), container_env(workload, container), where)


def test_every_container_runs_the_gpuledger_image_with_a_valid_command_line_and_settings():
    problems, roles = [], set()
    for w, c in containers():
        assert c["image"].split(":")[0] == IMAGE, f"{c['name']} runs {c['image']}"
        assert "command" not in c, f"{c['name']} overrides the image's gpuledger entrypoint"
        proc = process_of(w, c)
        problems += check_role(proc)
        roles.add((w["metadata"]["name"], proc.command, proc.source))
        if proc.command in SERVES_NO_METRICS:
            assert not c.get("ports"), f"{proc.where}: `gpuledger {proc.command}` listens on nothing, yet declares ports"
            continue
        metrics_port = proc.metrics_port
        assert metrics_port in {p["containerPort"] for p in c.get("ports", [])}, (
            f"{proc.where}: /metrics on {metrics_port} is not a declared container port")
    assert not problems, "\n".join(problems)
    assert len({c["image"] for _, c in containers()}) == 1, "every container runs the same image"
    assert roles >= {("gpuledger-node-producers", "produce", "podresources"),
                     ("gpuledger-node-producers", "produce", "dcgm"),
                     ("gpuledger-worker", "worker", None), ("gpuledger-sink", "sink", None),
                     ("gpuledger-k8s-producer", "produce", "k8s"),
                     ("gpuledger-requests-producer", "produce", "requests"),
                     ("gpuledger-fleet-metrics", "metrics", None)}, roles


def test_configmap_and_secret_hold_only_gpuledger_settings():
    for kind, field in (("ConfigMap", "data"), ("Secret", "stringData")):
        for name, obj in by_kind(kind).items():
            env = {k: v for k, v in obj.get(field, {}).items()}
            gpuledger_process(["config", "validate"], env, f"{kind} {name}")
            assert all(k.startswith("GPULEDGER_") for k in env), f"{kind} {name}: {sorted(env)}"


def test_an_unknown_variable_or_bad_value_in_a_container_is_caught():
    ds = copy.deepcopy(by_kind("DaemonSet")["gpuledger-node-producers"])
    c = ds["spec"]["template"]["spec"]["containers"][1]
    c["env"].append({"name": "GPULEDGER_DCGM_ULR", "value": "http://x:9400/metrics"})
    with pytest.raises(AssertionError, match="GPULEDGER_DCGM_ULR"):
        process_of(ds, c)
    c["env"][-1] = {"name": "GPULEDGER_SCRAPE_INTERVAL_S", "value": "ten"}
    with pytest.raises(AssertionError, match="refuse its settings"):
        process_of(ds, c)
    c["args"] = ["produce", "dcmg"]
    with pytest.raises(AssertionError, match="not a gpuledger command line"):
        process_of(ds, c)


def test_node_producers_read_this_nodes_kubelet_socket_and_dcgm_exporter():
    ds = by_kind("DaemonSet")["gpuledger-node-producers"]
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    procs = {}
    for c in pod["containers"]:
        proc = process_of(ds, c)
        procs[proc.source] = (c, proc.settings)
    for source, (c, s) in procs.items():
        assert s.node_name == NODE_NAME, f"{source}: the node name must come from spec.nodeName"
    c, s = procs["podresources"]
    mounts = [(Path(m["mountPath"]), volumes[m["name"]]) for m in c["volumeMounts"]]
    host = [vol["hostPath"]["path"] / s.podresources_socket.relative_to(path)
            for path, vol in mounts if "hostPath" in vol and s.podresources_socket.is_relative_to(path)]
    assert host == [KUBELET_PODRESOURCES_DIR / "kubelet.sock"], (
        f"{s.podresources_socket} must be the kubelet's socket mounted from the host, got {host}")
    c, s = procs["dcgm"]
    assert s.dcgm_url == f"http://{NODE_IP}:9400/metrics", f"dcgm-exporter on this node's IP, got {s.dcgm_url}"
    assert pod["nodeSelector"], "node producers belong on GPU nodes"
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod.get("tolerations", [])), "GPU nodes are tainted"


def test_selectors_services_and_ports_fit_together():
    templates = {}
    for w in workloads():
        labels = w["spec"]["template"]["metadata"]["labels"]
        selector = w["spec"]["selector"]["matchLabels"]
        assert selector.items() <= labels.items(), f"{w['metadata']['name']}: selector does not match its pods"
        ports = {p["name"]: p["containerPort"] for c in w["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        templates[w["metadata"]["name"]] = (labels, ports)
    for name, svc in by_kind("Service").items():
        matched = [(n, ports) for n, (labels, ports) in templates.items()
                   if svc["spec"]["selector"].items() <= labels.items()]
        assert len(matched) == 1, f"Service {name} selects {[n for n, _ in matched]}"
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            assert target in matched[0][1] or target in matched[0][1].values(), (
                f"Service {name} port {p['name']} targets {target}, which {matched[0][0]} does not declare")
    for w, c in containers():
        declared = {p["name"] for p in c.get("ports", [])} | {p["containerPort"] for p in c.get("ports", [])}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            action = c.get(probe, {}).get("httpGet") or c.get(probe, {}).get("tcpSocket")
            if action:
                assert action["port"] in declared, f"{c['name']}: {probe} checks port {action['port']}, not declared"
    for w in workloads():
        spec = w["spec"]["template"]["spec"]
        claims = {v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes", [])
                  if "persistentVolumeClaim" in v}
        assert claims <= set(by_kind("PersistentVolumeClaim")), claims
        assert spec["serviceAccountName"] in by_kind("ServiceAccount")


def test_every_container_is_locked_down_and_sized():
    for w, c in containers():
        where = (w["metadata"]["name"], c["name"])
        pod_sc = w["spec"]["template"]["spec"].get("securityContext", {})
        sc = {**{k: v for k, v in pod_sc.items() if k in ("runAsNonRoot", "runAsUser")}, **c["securityContext"]}
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True, where
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), where
        assert not sc.get("privileged"), where
        if where in ROOT_CONTAINERS:
            assert sc["runAsUser"] == 0, where
        else:
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0, f"{where} must run as a non-root user"
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"].get(kind, {})), f"{where}: resources.{kind}"
        home = process_of(w, c).settings.home
        writable = [m for m in c["volumeMounts"] if not m.get("readOnly") and home.is_relative_to(m["mountPath"])]
        assert writable, f"{where}: GPULEDGER_HOME {home} is on the read-only root filesystem"


# -- processing: the workers, the sink ------------------------------------------------------
def workloads_running(command: str) -> list[tuple[dict, dict, object]]:
    return [(w, c, proc) for w, c in containers() if (proc := process_of(w, c)).command == command]


def test_the_workers_scale_with_replicas_up_to_the_partition_count():
    found = workloads_running("worker")
    assert [(w["kind"], w["metadata"]["name"]) for w, _, _ in found] == [("Deployment", "gpuledger-worker")], (
        "the attribution workers: one Deployment, scaled with replicas")
    w, c, proc = found[0]
    replicas = w["spec"]["replicas"]
    partitions = proc.settings.source_partitions
    assert 2 <= replicas <= partitions, (
        f"{replicas} worker replicas: run at least 2, and at most GPULEDGER_SOURCE_PARTITIONS ({partitions}); "
        "a worker holds whole units (one source partition each), so more replicas sit idle")
    assert w["spec"].get("strategy", {}).get("type", "RollingUpdate") == "RollingUpdate", (
        "workers join and leave the group freely: roll them, do not stop them all (Recreate)")
    pod = w["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v], (
        "worker state lives in the changelog topics; a volume claim would pin replicas to one volume")
    assert not proc.settings.clickhouse_dsn, "the workers never touch ClickHouse: no ClickHouse Secret"
    assert not any(src.get("secretRef") for src in c.get("envFrom", [])), c.get("envFrom")
    assert pod["terminationGracePeriodSeconds"] >= 30, "SIGTERM: the worker commits before it exits"
    services = [s for s in by_kind("Service").values()
                if s["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()]
    assert services and all(s["spec"].get("clusterIP") == "None" for s in services), (
        "every worker replica is its own scrape target: a headless Service, one endpoint per pod")


def test_the_sink_writes_the_clickhouse_server_from_its_own_deployment():
    found = workloads_running("sink")
    assert [(w["kind"], w["metadata"]["name"]) for w, _, _ in found] == [("Deployment", "gpuledger-sink")]
    w, c, proc = found[0]
    assert w["spec"]["replicas"] >= 1
    assert proc.settings.clickhouse_dsn == by_kind("Secret")["gpuledger-clickhouse"]["stringData"][
        "GPULEDGER_CLICKHOUSE_DSN"], "the sink logs in with the writer DSN of clickhouse.env"
    assert len(workloads_running("process")) == 0, (
        "`gpuledger process` is the single-machine (embedded engine) form: run `worker` and `sink` apart")
    readers = {w["metadata"]["name"] for w, _, p in (*workloads_running("sink"), *workloads_running("metrics"))}
    with_secret = {w["metadata"]["name"] for w, c in containers()
                   if any(src.get("secretRef", {}).get("name") == "gpuledger-clickhouse" for src in c.get("envFrom", []))}
    assert with_secret == readers, f"only the sink and the fleet gauges get the ClickHouse login: {sorted(with_secret)}"


def _selects(selector: dict, labels: dict) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items() and not selector.get("matchExpressions")


def test_neither_worker_nor_sink_is_reachable_from_outside_the_cluster():
    policies = by_kind("NetworkPolicy")
    for command in ("worker", "sink"):
        for w, c, proc in workloads_running(command):
            name = w["metadata"]["name"]
            pod = w["spec"]["template"]["spec"]
            labels = w["spec"]["template"]["metadata"]["labels"]
            assert not pod.get("hostNetwork") and not pod.get("hostPID"), f"{name} shares the node's network"
            assert not any("hostPort" in p for p in c.get("ports", [])), f"{name} binds a port on the node"
            for sname, svc in by_kind("Service").items():
                if svc["spec"]["selector"].items() <= labels.items():
                    assert svc["spec"].get("type", "ClusterIP") == "ClusterIP" and not svc["spec"].get("externalIPs"), (
                        f"Service {sname} exposes {name} outside the cluster")
            declared = {p["name"] for p in c.get("ports", [])}
            assert declared == (set() if command in SERVES_NO_METRICS else {"metrics"}), (
                f"{name} declares ports {sorted(declared)}: the worker listens only for /metrics, the sink not at all")
            mine = [p for p in policies.values() if _selects(p["spec"]["podSelector"], labels)
                    and "Ingress" in p["spec"]["policyTypes"]]
            assert mine, f"no NetworkPolicy restricts ingress to the {name} pods"
            rules = [r for p in mine for r in p["spec"].get("ingress", [])]
            if command in SERVES_NO_METRICS:
                assert rules == [], f"{name} listens on nothing: its NetworkPolicy admits nothing"
                continue
            for r in rules:
                assert [p["port"] for p in r.get("ports", [])] in (["metrics"], [proc.metrics_port]), (
                    f"{name}: ingress beyond its /metrics port: {r}")
                assert r.get("from") and all("ipBlock" not in peer for peer in r["from"]), (
                    f"{name}: /metrics open to any address, not only to pods in the cluster: {r}")
