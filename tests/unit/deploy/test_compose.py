"""docker-compose.yml against the Compose Specification and against gpuledger itself.

The schema is the compose-spec project's ``schema/compose-spec.json`` (JSON Schema 2020-12),
vendored in ``tests/fixtures/schemas`` (its README names the source and hash), so this runs
offline. Beyond the schema: the gpuledger services share the one image built from
deploy/Dockerfile, run command lines gpuledger's parser accepts with settings it accepts,
reach the broker and the server by their service names, wait for healthy dependencies,
mount only paths that exist, and Prometheus scrapes the ports they serve /metrics on.
Secrets are required from .env (``${VAR:?}``; checked with sample values here): what keeps
the stack safe to expose is in test_compose_exposure.py.
Processing is the attribution workers (replicas of one consumer group, no ClickHouse login)
and the sink (fact topics into the ClickHouse server); neither publishes a port.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
from concurrent.futures import Future
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from deploy_support import REPO, SERVES_NO_METRICS, check_role, gpuledger_process

from gpuledger.sinks.access import AccessModel
from gpuledger.sinks.access_logins import stack_logins

COMPOSE = REPO / "docker-compose.yml"
SCHEMA = REPO / "tests" / "fixtures" / "schemas" / "compose-spec.json"
DOCKERFILE = REPO / "deploy" / "Dockerfile"
PROMETHEUS = REPO / "deploy" / "prometheus" / "prometheus.yml"
BUILD = {"context": ".", "dockerfile": "deploy/Dockerfile"}
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*)|(:\?)([^}]*))?\}")
CREATE_USER = re.compile(
    r"CREATE USER (?:IF NOT EXISTS )?`?([\w.-]+)`? IDENTIFIED WITH sha256_hash BY '([0-9a-fA-F]{64})'")
LOGINS_SCRIPT = REPO / "deploy" / "clickhouse" / "logins.sh"
HOST_INPUTS = {"${KUBECONFIG:-~/.kube/config}"}  # bind sources the operator supplies, outside the repository


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def schema_errors(doc: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]


def interpolate(value: str) -> str:
    """Compose's interpolation with every optional variable unset (the stack's defaults) and
    every required one (``${VAR:?message}``, the secrets of .env) at its sample value."""
    assert all(m.group(2) or m.group(4) for m in INTERPOLATION.finditer(value)), (
        f"{value!r}: every ${{VAR}} needs a default (${{VAR:-default}}) or is a secret required from "
        "the .env that `make .env` writes (${{VAR:?message}})")
    return INTERPOLATION.sub(lambda m: m.group(3) if m.group(2) else sample_secret(m.group(1)), value)


def sample_secret(name: str) -> str:
    """A stand-in for a secret of .env (hex, as `make .env` writes), the same for one name."""
    return hashlib.sha256(f"sample {name}".encode()).hexdigest()[:48]


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(str(v)) for k, v in env.items()}


def gpuledger_services(doc: dict) -> dict[str, dict]:
    return {name: svc for name, svc in doc["services"].items()
            if "build" in svc or str(svc.get("image", "")).startswith("gpuledger")}


def processes(doc: dict):
    return {name: gpuledger_process(svc.get("command"), env_of(svc), f"service {name}")
            for name, svc in gpuledger_services(doc).items()}


def host_port(address: str) -> tuple[str, int]:
    parts = urlsplit(address if "://" in address else f"//{address}")
    return parts.hostname, parts.port


def bind_mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read-only) of every bind mount; named volumes are left out."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, str):
            source, target, *mode = v.split(":")
            if source.startswith((".", "/", "~", "$")):
                out.append((source, target, "ro" in ",".join(mode).split(",")))
        elif v.get("type") == "bind":
            out.append((v["source"], v["target"], bool(v.get("read_only"))))
    return out


# -- the Compose Specification -------------------------------------------------------------
def test_vendored_schema_is_the_documented_compose_spec():
    readme = (SCHEMA.parent / "README.md").read_text()
    documented = re.search(r"sha256 `([0-9a-f]{64})`", readme)
    assert documented, "tests/fixtures/schemas/README.md must name the sha256 of compose-spec.json"
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == documented.group(1)
    schema = json.loads(SCHEMA.read_text())
    assert schema["title"] == "Compose Specification"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_compose_file_is_valid_against_the_compose_specification():
    errors = schema_errors(load_compose())
    assert not errors, "docker-compose.yml breaks the Compose Specification:\n" + "\n".join(errors)


@pytest.mark.parametrize("mistake, change", [
    ("misspelt service key", lambda d: d["services"]["worker"].update(enviroment={})),
    ("misspelt healthcheck key", lambda d: d["services"]["kafka"]["healthcheck"].update(intervall="5s")),
    ("wrong type", lambda d: d["services"]["kafka"]["healthcheck"].update(retries=[12])),
    ("unknown depends_on condition", lambda d: d["services"]["worker"]["depends_on"]["kafka"].update(
        condition="service_up")),
    ("misspelt top-level key", lambda d: d.update(servics={})),
])
def test_the_schema_check_rejects_mistakes(mistake, change):
    doc = load_compose()
    change(doc)
    assert schema_errors(doc), f"a {mistake} passed the Compose Specification check"


# -- gpuledger services ---------------------------------------------------------------------
def test_every_gpuledger_service_runs_the_one_image_built_from_deploy_dockerfile():
    doc = load_compose()
    ours = gpuledger_services(doc)
    assert {"worker", "sink", "requests-producer", "k8s-producer", "fleet-metrics"} <= set(ours)
    images = {svc.get("image") for svc in ours.values()}
    assert len(images) == 1 and None not in images, f"gpuledger services use several images: {images}"
    for name, svc in ours.items():
        assert svc.get("build") == BUILD, f"service {name} builds {svc.get('build')}, not {BUILD}"
    others = {n for n, s in doc["services"].items() if n not in ours and ("build" in s or s.get("image") in images)}
    assert not others, f"services {others} build or reuse the gpuledger image without being gpuledger services"
    text = DOCKERFILE.read_text()
    assert re.search(r'^ENTRYPOINT \["gpuledger"\]\s*$', text, re.M), "the image's entrypoint must be gpuledger"
    assert re.search(r"^USER (?!0\b|root\b)\S+", text, re.M), "the image must run as a non-root user"
    ignored = set((REPO / "deploy" / "Dockerfile.dockerignore").read_text().split())
    assert {".git", ".venv", ".cache", ".gpuledger"} <= ignored, "local state must stay out of the build context"


def test_every_command_is_a_gpuledger_command_line_with_valid_settings():
    procs = processes(load_compose())
    problems = [p for proc in procs.values() for p in check_role(proc)]
    assert not problems, "\n".join(problems)
    roles = {(p.command, p.source) for p in procs.values()}
    assert {("worker", None), ("sink", None), ("produce", "k8s"), ("produce", "requests"), ("metrics", None)} <= roles
    assert "process" not in {p.command for p in procs.values()}, (
        "`gpuledger process` is the single-machine (embedded engine) form; the stack runs `worker` and `sink`")


def test_every_gpuledger_variable_is_a_setting():
    doc = load_compose()
    for name, svc in gpuledger_services(doc).items():
        gpuledger_process(svc["command"], env_of(svc), f"service {name}")  # raises on an unknown GPULEDGER_*
    broken = copy.deepcopy(doc)
    broken["services"]["worker"]["environment"]["GPULEDGER_KAFKA_BOOTSRAP"] = "kafka:9092"
    with pytest.raises(AssertionError, match="GPULEDGER_KAFKA_BOOTSRAP"):
        processes(broken)


def test_a_bad_command_or_a_bad_setting_value_is_caught():
    doc = load_compose()
    doc["services"]["requests-producer"]["command"] = ["produce", "request", "--listen", "0.0.0.0:8089"]
    with pytest.raises(AssertionError, match="not a gpuledger command line"):
        processes(doc)
    doc = load_compose()
    doc["services"]["requests-producer"]["environment"]["GPULEDGER_PRODUCER_METRICS_PORT"] = "nine"
    with pytest.raises(AssertionError, match="refuse its settings"):
        processes(doc)


def test_gpuledger_services_reach_the_broker_and_the_server_by_service_name():
    doc = load_compose()
    kafka, clickhouse = doc["services"]["kafka"], doc["services"]["clickhouse"]
    assert re.fullmatch(r"apache/kafka:3\.9\.\d+", kafka["image"]), kafka["image"]
    kenv = env_of(kafka)
    assert kenv["KAFKA_PROCESS_ROLES"] == "broker,controller" and kenv.get("CLUSTER_ID"), "a KRaft node needs both"
    advertised = dict(reversed(item.split("://", 1)) for item in kenv["KAFKA_ADVERTISED_LISTENERS"].split(","))
    logins = clickhouse_logins(clickhouse)
    for name, proc in processes(doc).items():
        assert proc.settings.kafka_bootstrap in advertised, (
            f"service {name} connects to {proc.settings.kafka_bootstrap}; the broker advertises {sorted(advertised)}")
        assert host_port(proc.settings.kafka_bootstrap)[0] in doc["services"]
        if proc.settings.clickhouse_dsn:
            dsn = urlsplit(proc.settings.clickhouse_dsn)
            assert (dsn.hostname, dsn.port) == ("clickhouse", 8123), proc.settings.clickhouse_dsn
            assert logins.get(dsn.username) == sha256(dsn.password), (
                f"service {name} logs in to ClickHouse as {dsn.username}, which is no login of the server "
                f"with that password (logins: {sorted(logins)})")
            assert dsn.username != env_of(clickhouse)["CLICKHOUSE_USER"], (
                f"service {name} logs in as the server's administrator, which reads no facts under row policies")


def sha256(text: str | None) -> str:
    return hashlib.sha256((text or "").encode()).hexdigest()


def clickhouse_logins(clickhouse: dict) -> dict[str, str]:
    """User -> sha256 of its password: the administrator of CLICKHOUSE_USER/CLICKHOUSE_PASSWORD,
    every user the SQL mounted into /docker-entrypoint-initdb.d creates, and the logins of
    logins.sh with the passwords of the server's environment (the script itself is run in
    tests/unit/sinks/test_access_logins.py)."""
    env = env_of(clickhouse)
    logins = {env["CLICKHOUSE_USER"]: sha256(env["CLICKHOUSE_PASSWORD"])}
    for source, target, _ in bind_mounts(clickhouse):
        if target.startswith("/docker-entrypoint-initdb.d/") and target.endswith(".sql"):
            sql = (REPO / source).read_text()
            for user, digest in CREATE_USER.findall(sql):
                logins[user] = digest.lower()
        elif target.startswith("/docker-entrypoint-initdb.d/") and target.endswith(".sh"):
            assert (REPO / source).resolve() == LOGINS_SCRIPT, f"{source}: an init script this test does not know"
            for login in stack_logins(AccessModel(env.get("CLICKHOUSE_DB", "gpuledger"))):
                assert env.get(login.password_env), f"the server is not given {login.password_env} (logins.sh)"
                logins[login.user] = sha256(env[login.password_env])
    return logins


def test_dependencies_wait_for_healthy_services():
    doc = load_compose()
    services = doc["services"]
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        deps = {d: {"condition": "service_started"} for d in deps} if isinstance(deps, list) else deps
        for dep, spec in deps.items():
            assert dep in services, f"service {name} depends on {dep}, which is not a service"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"service {name} waits for {dep} to be healthy; it has no healthcheck")
    for name, proc in processes(doc).items():
        assert "healthcheck" in services[name], f"service {name} has no healthcheck"
        needs = {"kafka"} if proc.command in ("worker", "sink", "process", "produce") else set()
        needs |= {"clickhouse"} if proc.settings.clickhouse_dsn else set()
        for dep in needs:
            assert services[name]["depends_on"][dep]["condition"] == "service_healthy", (
                f"service {name} must wait for {dep} to be healthy")


def replicas(service: dict) -> int:
    return int((service.get("deploy") or {}).get("replicas", 1))


def test_the_workers_scale_out_as_replicas_of_one_group():
    doc = load_compose()
    procs = processes(doc)
    workers = {name: doc["services"][name] for name, p in procs.items() if p.command == "worker"}
    assert list(workers) == ["worker"], f"one worker service, scaled with replicas, not several: {sorted(workers)}"
    svc, proc = workers["worker"], procs["worker"]
    n = replicas(svc)
    assert 2 <= n <= proc.settings.source_partitions, (
        f"{n} worker replicas: run at least 2, and at most GPULEDGER_SOURCE_PARTITIONS "
        f"({proc.settings.source_partitions}): a worker holds whole units (one source partition each), "
        "so more replicas than partitions sit idle")
    assert "container_name" not in svc, "a fixed container_name allows only one replica"
    assert not any(target.startswith("/var/lib/gpuledger") for _, target, _ in bind_mounts(svc))
    named = [v for v in svc.get("volumes", []) if not isinstance(v, str) or not v.startswith((".", "/", "~", "$"))]
    assert not named, f"workers keep their state in the changelog topics; a volume shared by replicas: {named}"
    sources = {p.settings.source_partitions for p in procs.values()}
    assert sources == {proc.settings.source_partitions}, (
        f"every process must agree on the source partition count (the topics are created by whoever comes "
        f"first): {sources}")
    sinks = [name for name, p in procs.items() if p.command == "sink"]
    assert sinks == ["sink"], sinks
    fleet = doc["services"]["fleet-metrics"]["depends_on"]
    assert fleet.get("sink", {}).get("condition") == "service_healthy", (
        "the fleet gauges read tables the sink creates: wait for the sink to be healthy")


def test_neither_worker_nor_sink_listens_publicly():
    doc = load_compose()
    for name, proc in processes(doc).items():
        if proc.command not in ("worker", "sink"):
            continue
        svc = doc["services"][name]
        assert not svc.get("ports"), f"service {name} publishes {svc['ports']} on the host"
        assert svc.get("network_mode") is None, f"service {name} joins network {svc['network_mode']}"
    config = yaml.safe_load(PROMETHEUS.read_text())
    worker_jobs = [job for job in config["scrape_configs"] if job["job_name"] == "gpuledger-worker"]
    assert len(worker_jobs) == 1
    job = worker_jobs[0]
    assert not any(host_port(t)[0] == "worker" for sc in job.get("static_configs", []) for t in sc["targets"]), (
        "a static target resolves the service name once: one replica scraped, the others never")
    assert {(n, sd.get("type", "SRV"), sd.get("port")) for sd in job.get("dns_sd_configs", []) for n in sd["names"]} == {
        ("worker", "A", processes(doc)["worker"].metrics_port)}, "Prometheus must find every worker replica by name"


class _Group:
    def __init__(self, hosts):
        self.members = [type("Member", (), {"host": h})() for h in hosts]


def sink_health(hosts_by_group: dict[str, list[str]]) -> tuple[int, list]:
    """Run the sink's healthcheck script as the container would, against a broker whose
    consumer groups have members at ``hosts_by_group``; (exit status, groups asked for)."""
    sink = load_compose()["services"]["sink"]
    kind, python, flag, script = sink["healthcheck"]["test"]
    assert (kind, python, flag) == ("CMD", "python", "-c")
    env = env_of(sink)
    asked = []

    class FakeAdmin:
        def __init__(self, conf):
            assert conf["bootstrap.servers"] == env["GPULEDGER_KAFKA_BOOTSTRAP"]

        def describe_consumer_groups(self, groups, **kwargs):
            asked.extend(groups)
            out = {}
            for g in groups:
                future = Future()
                if g in hosts_by_group:
                    future.set_result(_Group(hosts_by_group[g]))
                else:
                    future.set_exception(RuntimeError("Broker: Not coordinator"))
                out[g] = future
            return out

    with mock.patch.dict(os.environ, env), mock.patch("confluent_kafka.admin.AdminClient", FakeAdmin):
        try:
            exec(compile(script, "sink healthcheck", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
        except Exception:  # noqa: BLE001 — python -c exits 1 on an uncaught exception
            code = 1
    return code, asked


def test_the_sink_is_healthy_while_this_container_is_a_member_of_its_group():
    me = socket.getaddrinfo(socket.gethostname(), None)[0][4][0]
    group = processes(load_compose())["sink"].settings.topic_prefix + "-sink"  # cli/main.py cmd_sink
    assert sink_health({group: [f"/{me}"]}) == (0, [group])
    assert sink_health({group: ["/10.255.255.1", f"/{me}"]})[0] == 0
    assert sink_health({group: ["/10.255.255.1"]})[0] == 1, "another sink's membership is not this one's health"
    assert sink_health({group: []})[0] == 1
    assert sink_health({})[0] == 1, "no such group yet: not healthy"
    assert sink_health({f"{group}-other": [f"/{me}"]})[0] == 1


def test_every_mounted_path_exists_in_the_repository():
    doc = load_compose()
    for name, svc in doc["services"].items():
        for source, target, read_only in bind_mounts(svc):
            if source in HOST_INPUTS:
                assert read_only, f"service {name} mounts {source} writable"
                continue
            assert source.startswith("./"), f"service {name} mounts {source}: a path in the repository, ./..."
            assert (REPO / source).exists(), f"service {name} mounts {source} at {target}; it does not exist"
            assert read_only, f"service {name} mounts {source} writable; configuration is mounted read-only"


def config_file_on_host(service: dict, flag: str) -> Path:
    """The repository file a service's ``--flag=/container/path`` reads, through its mounts."""
    value = next(a.split("=", 1)[1] for a in service["command"] if a.startswith(f"--{flag}="))
    for source, target, _ in bind_mounts(service):
        if value == target or value.startswith(target.rstrip("/") + "/"):
            return REPO / source / Path(value).relative_to(target)
    raise AssertionError(f"{value} is in no bind mount of the service")


def test_grafana_gets_the_clickhouse_plugin_datasource_and_dashboards():
    grafana = load_compose()["services"]["grafana"]
    env = env_of(grafana)
    # id@version pins the plugin (Grafana updates unpinned ones): the version the macro model follows
    assert "grafana-clickhouse-datasource@4.20.0" in env["GF_PLUGINS_PREINSTALL_SYNC"].split(",")
    mounts = {target: source for source, target, _ in bind_mounts(grafana)}
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    provisioning = REPO / "deploy" / "grafana" / "provisioning"
    datasources = [ds for f in sorted((provisioning / "datasources").glob("*.y*ml"))
                   for ds in yaml.safe_load(f.read_text())["datasources"]]
    clickhouse = [ds for ds in datasources if ds["type"] == "grafana-clickhouse-datasource"]
    assert len(clickhouse) == 1 and clickhouse[0]["jsonData"]["host"] == "clickhouse", datasources
    ds = clickhouse[0]
    logins = clickhouse_logins(load_compose()["services"]["clickhouse"])
    user, password = ds["jsonData"].get("username"), ds.get("secureJsonData", {}).get("password")
    password = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env[m.group(1) or m.group(2)], password)  # as Grafana
    assert logins.get(user) == sha256(password), f"Grafana logs in as {user!r}, which is no login of the server"
    assert user != env_of(load_compose()["services"]["clickhouse"])["CLICKHOUSE_USER"], (
        f"Grafana logs in as the server's administrator {user!r}, which reads no facts under row policies; "
        "use a reader login of deploy/clickhouse (logins.sh)")
    wanted = {ref["uid"] for f in (REPO / "deploy" / "grafana" / "dashboards").glob("*.json")
              for ref in datasource_refs(json.loads(f.read_text())) if ref.get("type") == ds["type"]}
    assert wanted <= {ds.get("uid")}, (
        f"dashboards ask for datasource uids {sorted(wanted)}; provisioned: {ds.get('uid')}")
    providers = [p for f in sorted((provisioning / "dashboards").glob("*.y*ml"))
                 for p in yaml.safe_load(f.read_text()).get("providers", [])]
    assert any(p["options"]["path"] == "/var/lib/grafana/dashboards" for p in providers), (
        "no dashboard provider in deploy/grafana/provisioning/dashboards reads /var/lib/grafana/dashboards, "
        "where ./deploy/grafana/dashboards is mounted")
    for p in providers:
        path = p["options"]["path"]
        assert path in mounts and (REPO / mounts[path]).is_dir(), (
            f"dashboard provider {p['name']} reads {path}, which no Grafana mount provides")


def datasource_refs(node):
    """Every ``{"type": ..., "uid": ...}`` datasource reference in a dashboard."""
    if isinstance(node, dict):
        ref = node.get("datasource")
        if isinstance(ref, dict) and "uid" in ref:
            yield ref
        for v in node.values():
            yield from datasource_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from datasource_refs(v)


def test_prometheus_scrapes_what_the_services_serve_and_loads_the_rules():
    doc = load_compose()
    services = doc["services"]
    prom = services["prometheus"]
    assert config_file_on_host(prom, "config.file") == PROMETHEUS
    assert config_file_on_host(services["alertmanager"], "config.file").is_file()
    config = yaml.safe_load(PROMETHEUS.read_text())
    rules = {p.relative_to(PROMETHEUS.parent).as_posix() for p in (PROMETHEUS.parent / "rules").glob("*")}
    loaded = {r for r in rules if any(fnmatch.fnmatch(r, g) for g in config["rule_files"])}
    assert loaded and loaded == rules, f"rule files not loaded: {sorted(rules - loaded)}"
    targets = {t for job in config["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    targets |= {f"{name}:{sd['port']}" for job in config["scrape_configs"] for sd in job.get("dns_sd_configs", [])
                for name in sd["names"]}
    served = {f"{name}:{proc.metrics_port}" for name, proc in processes(doc).items()
              if proc.command not in SERVES_NO_METRICS}
    assert served <= targets, f"not scraped: {sorted(served - targets)}"
    for target in targets:
        host, _port = host_port(target)
        assert host == "localhost" or host in services, f"Prometheus scrapes {target}: no such service"
    static = {host_port(t)[0] for job in config["scrape_configs"] for sc in job.get("static_configs", [])
              for t in sc["targets"]}
    optional = sorted(h for h in static if services.get(h, {}).get("profiles"))
    assert not optional, f"static targets {optional} run only under a profile: they would alert as down without it"
    am = {t for a in config["alerting"]["alertmanagers"] for sc in a["static_configs"] for t in sc["targets"]}
    assert am == {"alertmanager:9093"}


def test_promtool_accepts_the_prometheus_configuration():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: install Debian's prometheus package (apt-get install prometheus)"
    result = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
