"""Every object of deploy/kubernetes (the kustomization's output, built by kubectl's kustomize)
and of deploy/kubernetes/clickhouse is created on a real kube-apiserver with strict field
validation: the API server's admission (schemas, defaulting, validation, unknown or duplicate
fields refused) accepts them all. Nothing runs: there is no scheduler, controller or kubelet.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from sources.real_apiserver import REPO, ApiError

pytestmark = pytest.mark.integration
MANIFESTS = REPO / "deploy" / "kubernetes"


def built(kube, tmp_path, kustomization) -> list[dict]:
    """``kubectl kustomize`` of a copy of ``kustomization`` (with clickhouse.env made from its example)."""
    copy = tmp_path / kustomization.name
    shutil.copytree(kustomization, copy, ignore=shutil.ignore_patterns("clickhouse.env"))
    if (copy / "clickhouse.env.example").exists():
        shutil.copy(copy / "clickhouse.env.example", copy / "clickhouse.env")
    answer = kube.kubectl("kustomize", str(copy))
    assert answer.returncode == 0, answer.stderr
    return [doc for doc in yaml.safe_load_all(answer.stdout) if doc]


def apply(kube, objects: list[dict], *flags: str):
    return kube.kubectl("apply", "--validate=strict", *flags, "-f", "-",
                        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def test_every_object_of_the_kustomization_is_accepted_by_the_api_server(kube, tmp_path):
    objects = built(kube, tmp_path, MANIFESTS)
    kinds = {o["kind"] for o in objects}
    assert len(objects) >= 15 and {"Namespace", "ClusterRole", "Deployment", "DaemonSet", "Secret", "ConfigMap",
                                   "NetworkPolicy", "Service"} <= kinds, kinds
    kube.namespace("clickhouse")  # where the ClickHouse server runs (its own kustomization below)
    objects += built(kube, tmp_path, MANIFESTS / "clickhouse")
    ns_first = sorted(objects, key=lambda o: o["kind"] != "Namespace")
    done = apply(kube, ns_first[:1])
    assert done.returncode == 0, done.stderr
    dry = apply(kube, ns_first[1:], "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    done = apply(kube, ns_first[1:])
    assert done.returncode == 0, done.stderr
    for obj in objects:  # each is stored as sent: read back, with the server's defaults added
        meta = obj["metadata"]
        ns = ["-n", meta["namespace"]] if meta.get("namespace") else []
        got = kube.kubectl("get", obj["kind"].lower(), meta["name"], *ns, "-o", "json")
        assert got.returncode == 0, got.stderr
        stored = json.loads(got.stdout)
        labels = stored["metadata"].get("labels", {})
        assert {k: labels.get(k) for k in meta.get("labels", {})} == meta.get("labels", {}), meta["name"]
        if obj["kind"] in ("Deployment", "DaemonSet"):
            want = [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]]
            assert [c["image"] for c in stored["spec"]["template"]["spec"]["containers"]] == want


def test_the_api_server_refuses_a_misspelt_field(kube, tmp_path):
    objects = built(kube, tmp_path, MANIFESTS)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    try:
        kube.namespace(deployment["metadata"]["namespace"])
    except ApiError as exc:
        assert exc.status == 409, exc  # made by the test above
    refused = apply(kube, [deployment], "--dry-run=server")
    assert refused.returncode != 0 and "imagePullPolcy" in refused.stderr, refused.stderr
