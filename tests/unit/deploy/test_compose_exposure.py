"""The compose stack is safe to start on a machine others can reach.

Ports are published on 127.0.0.1 unless GPULEDGER_BIND says otherwise; every secret comes
from .env, which ``make .env`` writes with random values (mode 0600, never committed), and
compose refuses to start without one (``${VAR:?}``): no password has a default, none is in
the repository. Prometheus' lifecycle and admin APIs are off. The gpuledger processes serve
/metrics on 127.0.0.1 by default and the stack opens them to the compose network, where
Prometheus scrapes them.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
from deploy_support import REPO, SERVES_NO_METRICS
from test_compose import INTERPOLATION, interpolate, load_compose, processes

from gpuledger.config.settings import Settings

COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY$", re.I)
BIND = "${GPULEDGER_BIND:-127.0.0.1}"


def required_variables() -> set[str]:
    return {m.group(1) for m in INTERPOLATION.finditer(COMPOSE_TEXT) if m.group(4)}


def make_secrets() -> set[str]:
    """The names ``make .env`` writes (STACK_SECRETS of the Makefile)."""
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    return set(re.search(r"^STACK_SECRETS\s*:=\s*(.+)$", text, re.M).group(1).split())


def test_every_published_port_is_on_the_loopback_address_unless_gpuledger_bind_says_otherwise():
    published = []
    for name, svc in load_compose()["services"].items():
        assert svc.get("network_mode") != "host", f"service {name} shares the host's network"
        for port in svc.get("ports", []):
            if isinstance(port, dict):
                assert interpolate(str(port.get("host_ip", ""))) == "127.0.0.1", f"service {name}: {port}"
                continue
            assert port.startswith(BIND + ":"), f"service {name} publishes {port!r}: use {BIND}:HOST:CONTAINER"
            host_ip, host_port, container_port = interpolate(port).split(":")
            assert host_ip == "127.0.0.1" and host_port.isdigit() and container_port.isdigit(), port
            published.append(name)
    assert {"kafka", "clickhouse", "grafana", "prometheus", "alertmanager"} <= set(published)


def test_no_secret_has_a_default_and_every_one_is_required_from_env():
    for m in INTERPOLATION.finditer(COMPOSE_TEXT):
        if SECRET_NAME.search(m.group(1)):
            assert m.group(4), f"{m.group(0)}: a secret has no default; require it with ${{{m.group(1)}:?...}}"
    for literal in (":-admin", ":-gpuledger", "gpuledger_worker:gpuledger_worker@", "grafana:grafana@"):
        assert literal not in COMPOSE_TEXT, f"a default credential is back in docker-compose.yml: {literal}"
    for name, svc in load_compose()["services"].items():
        env = svc.get("environment") or {}
        for key, value in env.items():
            value = str(value)
            if SECRET_NAME.search(key):
                assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", value), f"service {name}: {key} is {value!r}, not from .env"
            for userinfo in re.findall(r"://[^/@\s:]+:([^@\s]+)@", value):
                assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", userinfo), f"service {name}: {key} carries a password"
    assert required_variables() == make_secrets(), (
        "every variable compose requires is one `make .env` writes, and no other")


def test_grafana_and_clickhouse_admin_passwords_are_required():
    services = load_compose()["services"]
    grafana, clickhouse = services["grafana"]["environment"], services["clickhouse"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == "${GRAFANA_ADMIN_PASSWORD:?run make .env}"
    assert grafana["GF_USERS_ALLOW_SIGN_UP"] == "false" and grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert clickhouse["CLICKHOUSE_PASSWORD"] == "${CLICKHOUSE_ADMIN_PASSWORD:?run make .env}"


def test_prometheus_lifecycle_and_admin_apis_are_off():
    for name, svc in load_compose()["services"].items():
        flags = [a for a in svc.get("command") or [] if isinstance(a, str)]
        for flag in ("--web.enable-lifecycle", "--web.enable-admin-api"):
            assert not any(a.split("=")[0] == flag for a in flags), f"service {name} runs with {flag}"
    assert any(a.startswith("--config.file=") for a in load_compose()["services"]["prometheus"]["command"])


def test_metrics_listen_on_loopback_by_default_and_on_the_compose_network_in_the_stack():
    assert Settings.model_fields["metrics_addr"].default == "127.0.0.1"
    for name, proc in processes(load_compose()).items():
        if proc.command not in SERVES_NO_METRICS:
            assert proc.settings.metrics_addr == "0.0.0.0", (
                f"service {name}: Prometheus scrapes it from another container (GPULEDGER_METRICS_ADDR)")


def run_make_env(directory) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(directory), "-f", str(REPO / "Makefile"), ".env",
                           f"PY={sys.executable}"], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is needed")
def test_make_env_writes_random_secrets_once_readable_by_the_owner_only(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    for d in (first, second):
        done = run_make_env(d)
        assert done.returncode == 0, done.stdout + done.stderr
    env_file = first / ".env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert set(values) == make_secrets() == required_variables()
    assert all(re.fullmatch(r"[0-9a-f]{48}", v) for v in values.values()), "192 random bits, hex"
    assert len(set(values.values())) == len(values), "every secret is its own"
    others = dict(line.split("=", 1) for line in (second / ".env").read_text().splitlines())
    assert not set(values.values()) & set(others.values()), "each .env is random"
    before = env_file.read_bytes()
    assert run_make_env(first).returncode == 0 and env_file.read_bytes() == before, "never overwritten"


def test_env_files_stay_out_of_git_and_of_the_image():
    ignored = (REPO / ".gitignore").read_text().split()
    assert ".env" in ignored and "deploy/kubernetes/clickhouse.env" in ignored
    assert ".env" in (REPO / "deploy" / "Dockerfile.dockerignore").read_text().split()
    if shutil.which("git") and (REPO / ".git").exists():
        tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True).stdout.split()
        assert not [f for f in tracked if os.path.basename(f) in (".env", "clickhouse.env")], tracked
    for path in (REPO / "deploy").rglob("*"):
        if path.is_file() and path.suffix in (".sql", ".sh", ".yaml", ".yml", ".xml", ".json"):
            assert not re.search(r"IDENTIFIED WITH \w+ BY '[0-9a-f]{16,}'", path.read_text()), (
                f"{path.relative_to(REPO)} holds a password hash")
