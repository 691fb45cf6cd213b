"""ClickHouse in deploy/kubernetes: the login is never a committed default, and the server's
access settings ship as a ConfigMap.

The DSN Secret is generated from clickhouse.env, which is not in git: kustomize refuses to
build without it (checked with ``kubectl kustomize`` or ``kustomize`` where one is installed;
the static checks of test_kubernetes_manifests.py read the committed example).
deploy/kubernetes/clickhouse/ holds config.d/access-control.xml as a ConfigMap for the
namespace the server runs in, the same bytes as deploy/clickhouse/config.d.
"""

from __future__ import annotations

import shutil
import subprocess
from urllib.parse import urlsplit

import pytest
import yaml
from test_kubernetes_manifests import KUBERNETES_VERSIONS, MANIFESTS, by_kind, schema_problems

from gpuledger.sinks.access import AccessModel
from gpuledger.sinks.access_logins import stack_logins

ACCESS_XML = MANIFESTS.parent / "clickhouse" / "config.d" / "access-control.xml"
SERVER_DIR = MANIFESTS / "clickhouse"
EXAMPLE = MANIFESTS / "clickhouse.env.example"


def kustomize_command() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def example_dsn() -> str:
    lines = [line for line in EXAMPLE.read_text().splitlines() if line and not line.startswith("#")]
    assert [line.split("=", 1)[0] for line in lines] == ["GPULEDGER_CLICKHOUSE_DSN"]
    return lines[0].split("=", 1)[1]


def test_the_example_login_is_the_writer_with_a_placeholder_password():
    dsn = urlsplit(example_dsn())
    writer = next(x for x in stack_logins(AccessModel()) if x.role == AccessModel().writer)
    assert dsn.username == writer.user and dsn.scheme == "http"
    assert dsn.password and "REPLACE" in dsn.password, "a placeholder, never a usable password"
    assert not (MANIFESTS / "secret.yaml").exists()
    assert "deploy/kubernetes/clickhouse.env" in (MANIFESTS.parents[1] / ".gitignore").read_text().split()


def test_the_access_settings_configmap_is_the_server_config_file():
    (cm,) = [d for d in yaml.safe_load_all((SERVER_DIR / "access-control-configmap.yaml").read_text()) if d]
    assert cm["kind"] == "ConfigMap" and list(cm["data"]) == ["access-control.xml"]
    assert cm["data"]["access-control.xml"] == ACCESS_XML.read_text()
    for version in KUBERNETES_VERSIONS:
        assert not schema_problems(cm, version)
    k = yaml.safe_load((SERVER_DIR / "kustomization.yaml").read_text())
    assert k["resources"] == ["access-control-configmap.yaml"]
    assert k["namespace"] == urlsplit(example_dsn()).hostname.split(".")[1], (
        "the ConfigMap goes to the namespace of the server the sink writes")
    assert "clickhouse" not in {o["metadata"].get("namespace") for o in by_kind("ConfigMap").values()}


@pytest.mark.skipif(kustomize_command() is None, reason="kustomize or kubectl is needed to build")
def test_kustomize_refuses_to_build_without_the_login_and_wires_it_when_given(tmp_path):
    tree = tmp_path / "kubernetes"
    shutil.copytree(MANIFESTS, tree, ignore=shutil.ignore_patterns("clickhouse.env"))
    cmd = kustomize_command()
    refused = subprocess.run([*cmd, str(tree)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "clickhouse.env" in refused.stderr, refused.stderr[-500:]
    (tree / "clickhouse.env").write_text(f"GPULEDGER_CLICKHOUSE_DSN={example_dsn()}\n")
    built = subprocess.run([*cmd, str(tree)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-2000:]
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert secret["metadata"]["name"].startswith("gpuledger-clickhouse-")
    assert secret["metadata"]["namespace"] == "gpuledger"
    users = {d["metadata"]["name"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
             for c in d["spec"]["template"]["spec"]["containers"] for src in c.get("envFrom", [])
             if src.get("secretRef", {}).get("name") == secret["metadata"]["name"]}
    assert users == {"gpuledger-sink", "gpuledger-fleet-metrics"}
    server = subprocess.run([*cmd, str(tree / "clickhouse")], capture_output=True, text=True, timeout=120)
    assert server.returncode == 0, server.stderr[-2000:]
    (cm,) = [d for d in yaml.safe_load_all(server.stdout) if d]
    assert cm["metadata"]["namespace"] == "clickhouse" and cm["data"]["access-control.xml"] == ACCESS_XML.read_text()
