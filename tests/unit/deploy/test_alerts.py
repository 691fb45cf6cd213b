"""The Prometheus alert rules, their promtool unit tests and the Alertmanager routing, checked
with the real tools (Debian's `prometheus` and `prometheus-alertmanager` packages), plus
contracts no tool checks: every series a rule reads is one gpuledger exports, every alert's
owner is routed to that owner's receiver, a node's GPU alerts are grouped by cluster and node,
and the inhibit rules (evaluated here as Alertmanager's inhibitor does: amtool cannot) hold
back exactly the alerts of a node already unavailable."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuledger.producers.runtime import ProducerMetrics
from gpuledger.sinks.fleet_metrics import FleetExporter
from gpuledger.streams.metrics import WorkerMetrics

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy/prometheus/rules/gpuledger.rules.yml"
RULE_TESTS = REPO / "deploy/prometheus/tests/gpuledger.rules.test.yml"
PROMETHEUS_CONFIG = REPO / "deploy/prometheus/prometheus.yml"
ALERTMANAGER_CONFIG = REPO / "deploy/alertmanager/alertmanager.yml"
RECEIVER_OF_OWNER = {"platform": "platform-sre", "capacity": "capacity-scheduling", "finance": "finance-finops"}
REQUIRED_ALERTS = {
    "AllocationWithoutTenantIdentity", "AllocatedButIdle", "GpuHealthIncident", "InferenceQueueSloBreach",
    "BorrowedCapacityNearLimit", "ConsumerLagHigh", "DeadLetterRateHigh", "TelemetryStale", "ProducerDown",
    "ProducerErrors", "GpuThrottled", "GpuInventoryMismatch",
}
PROMETHEUS_OWN_SERIES = {"up"}  # written by Prometheus itself for every scrape target
DCGM_SCRAPES = REPO / "tests/fixtures/dcgm"  # real-format dcgm-exporter scrapes: the exporter's own series


def dcgm_exporter_series() -> set[str]:
    """Series names dcgm-exporter writes, as they appear in the scrapes of tests/fixtures/dcgm."""
    return {m.group(1) for p in DCGM_SCRAPES.glob("*.txt")
            for m in re.finditer(r"^(DCGM_[A-Z0-9_]+)\{", p.read_text(), re.M)}
_PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "group_left", "group_right", "on", "ignoring", "by",
                 "without", "inf", "nan"}


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not installed: it comes with Debian's `{package}` package "
                    f"(apt-get install -y --no-install-recommends {package}; `make test` installs it)")
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=300)


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def series_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers left after removing strings,
    label matchers, range selectors and label lists, that are neither functions nor keywords."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        if s[m.end():].lstrip().startswith("(") or m.group(0).lower() in _PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def exported_series() -> set[str]:
    """Every series name the producer, worker and fleet registries expose (counters as
    ``_total``, histograms as ``_bucket``/``_count``/``_sum``)."""
    registries = [ProducerMetrics("dcgm").registry, WorkerMetrics().registry,
                  FleetExporter(open_reader=lambda: None).registry]
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
                "summary": ("", "_count", "_sum", "_created")}
    return {family.name + suffix for registry in registries for family in registry.collect()
            for suffix in suffixes.get(family.type, ("",))}


def test_promtool_checks_the_rules():
    done = run(tool("promtool", "prometheus"), "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass():
    done = run(tool("promtool", "prometheus"), "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_prometheus_config_loads_the_rules():
    done = run(tool("promtool", "prometheus"), "check", "config", str(PROMETHEUS_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    named = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    assert named and named <= jobs, f"rules name jobs {named - jobs} that prometheus.yml does not scrape"


def test_amtool_checks_the_alertmanager_config():
    done = run(tool("amtool", "prometheus-alertmanager"), "check-config", str(ALERTMANAGER_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 receivers" in done.stdout


def test_required_alerts_exist_with_owner_severity_and_fix():
    alerts = rules()
    assert REQUIRED_ALERTS <= {r["alert"] for r in alerts}
    for r in alerts:
        assert r["labels"].get("owner") in RECEIVER_OF_OWNER, r["alert"]
        assert r["labels"].get("severity") in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"] and "Fix:" in r["annotations"]["description"], r["alert"]


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in test.get("alert_rule_test", []):
            cases.setdefault(check["alertname"], set()).add(bool(check.get("exp_alerts")))
    for name in {r["alert"] for r in rules()}:
        assert cases.get(name) == {True, False}, f"{name}: needs a case where it fires and one where it does not"


def test_every_owner_routes_to_its_receiver():
    amtool = tool("amtool", "prometheus-alertmanager")
    for r in rules():
        owner = r["labels"]["owner"]
        labels = [f"alertname={r['alert']}", *(f"{k}={v}" for k, v in r["labels"].items())]
        done = run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER_CONFIG}", "--tree",
                   f"--verify.receivers={RECEIVER_OF_OWNER[owner]}", *labels)
        assert done.returncode == 0, f"{r['alert']}: {done.stdout}{done.stderr}"
        assert f'{{owner="{owner}"}}' in done.stdout, f"{r['alert']} reached its receiver by the default route only"


def test_inhibition_names_existing_alerts():
    names = {r["alert"] for r in rules()}
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    inhibited = set()
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            if not matcher.startswith("alertname"):
                continue  # another label (severity, signal) narrows the source
            m = re.fullmatch(r'alertname(=~?)"([^"]+)"', matcher)
            assert m, matcher
            referenced = set(m.group(2).split("|")) if m.group(1) == "=~" else {m.group(2)}
            assert referenced <= names, f"inhibit rule names unknown alerts {referenced - names}"
        inhibited |= {re.fullmatch(r'alertname=~?"([^"]+)"', t).group(1) for t in rule["target_matchers"]}
    assert any("AllocatedButIdle" in t for t in inhibited)  # stale telemetry must not read as idle


def test_series_the_rules_read_are_exported_by_gpuledger():
    exported = exported_series()
    used = {name for r in rules() for name in series_names(r["expr"])}
    assert {"up", "gpuledger_worker_consumer_lag_records", "gpuledger_producer_errors_total",
            "gpuledger_fleet_unattributed_gpus", "gpuledger_source_last_event_timestamp_seconds"} <= used
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"} <= used  # health from the real counters
    unknown = used - exported - PROMETHEUS_OWN_SERIES - dcgm_exporter_series()
    assert not unknown, f"rules read series no gpuledger registry exports: {sorted(unknown)}"


def test_series_names_reads_promql():
    expr = ('sum by (job, topic) (rate(gpuledger_a_total{topic=~"x.y"}[10m])) / on (job) group_left '
            'sum(gpuledger_b) > 1e3 and time() - gpuledger_c offset 5m')
    assert series_names(expr) == {"gpuledger_a_total", "gpuledger_b", "gpuledger_c"}


def _alert_labels(rule: dict) -> set[str] | None:
    """The labels an alert carries: its static labels and what its expression keeps (the
    outermost ``by (...)`` of each ``or`` branch, all of them); None when it keeps a raw
    series' labels (not known here)."""
    kept = None
    for branch in re.split(r"\bor\b", rule["expr"]):
        m = re.search(r"\b(?:sum|max|min|avg|count)\s+by\s*\(([^)]*)\)", branch)
        if m is None:
            continue
        labels = {x.strip() for x in m.group(1).split(",") if x.strip()}
        kept = labels if kept is None else kept & labels
    return None if kept is None else kept | set(rule.get("labels", {}))


def test_an_inhibition_with_equal_labels_only_targets_alerts_that_carry_them():
    # Alertmanager skips a target missing an `equal` label: the rule would silently never apply.
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    by_name: dict[str, list[dict]] = {}
    for r in rules():
        by_name.setdefault(r["alert"], []).append(r)
    checked = 0
    for rule in config["inhibit_rules"]:
        if not rule.get("equal"):
            continue
        for target in rule["target_matchers"]:
            m = re.fullmatch(r'alertname(=~?)"([^"]+)"', target)
            if m is None:
                continue
            for name in (m.group(2).split("|") if m.group(1) == "=~" else [m.group(2)]):
                for r in by_name[name]:
                    carried = _alert_labels(r)
                    assert carried is None or set(rule["equal"]) <= carried, (
                        f"{name} ({r['expr'][:60]}...) lacks {set(rule['equal']) - carried}: "
                        f"the inhibition by {rule['source_matchers']} can never hold it back")
                    checked += 1
    assert checked >= 3


def _static_labels(alertname: str, **labels: str) -> dict[str, str]:
    """An alert as Alertmanager receives it: its rule's static labels and the labels its
    expression keeps. Where an alert has several rules, the given labels pick one (``signal``,
    ``slo``)."""
    (static,) = {tuple(sorted(r["labels"].items())) for r in rules() if r["alert"] == alertname
                 and all(labels.get(k, v) == v for k, v in r["labels"].items())}
    return {"alertname": alertname, **dict(static), **labels}


def _route_taken(labels: dict[str, str]) -> tuple[dict, list[str]]:
    """The route amtool sends an alert to, and its effective group_by (inherited from the
    routes above it where it names none). amtool prints the matchers of each route taken;
    they are found again in the config to read what amtool does not print."""
    done = run(tool("amtool", "prometheus-alertmanager"), "config", "routes", "test",
               f"--config.file={ALERTMANAGER_CONFIG}", "--tree", *(f"{k}={v}" for k, v in labels.items()))
    assert done.returncode == 0, done.stdout + done.stderr
    printed = re.findall(r"(\{[^\n]*\})", done.stdout)
    route = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["route"]
    group_by = route["group_by"]
    for matchers in printed:
        (route,) = [r for r in route.get("routes", []) if "{" + ", ".join(r["matchers"]) + "}" == matchers]
        group_by = route.get("group_by", group_by)
    return route, group_by


def _group_key(labels: dict[str, str]) -> tuple:
    route, group_by = _route_taken(labels)
    return tuple(route.get("matchers", ())), tuple((k, labels.get(k, "")) for k in group_by)


def test_a_nodes_gpu_health_alerts_are_one_notification_per_cluster_and_node():
    xid_a = _static_labels("GpuHealthIncident", signal="xid", cluster_id="c1", node="n1", gpu_uuid="GPU-a", gpu="0")
    route, group_by = _route_taken(xid_a)
    assert route["matchers"] == ['alertname=~"GpuHealthIncident|GpuThrottled"']
    assert group_by == ["cluster_id", "node"]
    ecc_b = _static_labels("GpuHealthIncident", signal="ecc", cluster_id="c1", node="n1", gpu_uuid="GPU-b", gpu="1")
    throttled = _static_labels("GpuThrottled", cluster_id="c1", node="n1", gpu_uuid="GPU-c", gpu="2")
    other_node = {**xid_a, "node": "n2"}
    other_cluster = {**xid_a, "cluster_id": "c2"}
    assert _group_key(xid_a) == _group_key(ecc_b) == _group_key(throttled)  # one page for node n1
    assert len({_group_key(x) for x in (xid_a, other_node, other_cluster)}) == 3
    # the platform team's other alerts keep their own grouping
    lag = {"alertname": "ConsumerLagHigh", "owner": "platform", "severity": "warning", "cluster_id": "c1", "node": "n1"}
    assert _route_taken(lag)[0]["matchers"] == ['owner="platform"']


def _matches(matcher: str, labels: dict[str, str]) -> bool:
    """One Alertmanager matcher (``name=value``, ``!=``, ``=~``, ``!~``; regexes anchored; a
    missing label is the empty string)."""
    m = re.fullmatch(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"?((?:[^"\\]|\\.)*)"?\s*', matcher)
    assert m, matcher
    name, op, value = m.groups()
    have = labels.get(name, "")
    if op in ("=~", "!~"):
        return (re.fullmatch(value, have) is not None) == (op == "=~")
    return (have == value) == (op == "=")


def inhibited(target: dict[str, str], firing: list[dict[str, str]]) -> bool:
    """Alertmanager's inhibitor (inhibit.go, ``Mutes``): a target is held back by a rule whose
    target matchers it matches when a firing alert matches the rule's source matchers and
    has the same value (missing = empty) for every `equal` label; an alert that matches both
    sides of a rule is never held back by another such alert."""
    for rule in yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["inhibit_rules"]:
        if not all(_matches(m, target) for m in rule["target_matchers"]):
            continue
        two_sided = all(_matches(m, target) for m in rule["source_matchers"])
        for source in firing:
            if not all(_matches(m, source) for m in rule["source_matchers"]):
                continue
            if any(source.get(k, "") != target.get(k, "") for k in rule.get("equal", [])):
                continue
            if two_sided and all(_matches(m, source) for m in rule["target_matchers"]):
                continue
            return True
    return False


def test_matchers_are_anchored_and_negatable():
    assert _matches('alertname=~"Gpu.*"', {"alertname": "GpuThrottled"})
    assert not _matches('alertname=~"Gpu"', {"alertname": "GpuThrottled"})
    assert _matches('reason!~"(?i).*maint.*"', {"reason": "rma"}) and not _matches('owner!="x"', {"owner": "x"})
    assert _matches('node=""', {}) and not _matches('node="n1"', {})


def test_a_critical_health_incident_holds_back_idle_and_throttle_alerts_of_its_node_only():
    source = _static_labels("GpuHealthIncident", signal="xid", cluster_id="c1", node="n1", gpu_uuid="GPU-a", gpu="0")
    assert source["severity"] == "critical"

    def idle(cluster_id: str, node: str) -> dict[str, str]:
        return _static_labels("AllocatedButIdle", cluster_id=cluster_id, node=node, tenant_id="t1")

    assert inhibited(idle("c1", "n1"), [source])
    assert inhibited(_static_labels("GpuThrottled", cluster_id="c1", node="n1", gpu_uuid="GPU-b", gpu="1"), [source])
    assert not inhibited(idle("c1", "n2"), [source])  # another node of the cluster
    assert not inhibited(idle("c2", "n1"), [source])  # a node of the same name elsewhere
    assert not inhibited(idle("c1", "n1"), [])
    # a warning (GPUs marked unavailable in the inventory, per cluster) holds nothing back
    warning = _static_labels("GpuHealthIncident", signal="inventory", cluster_id="c1", reason="rma")
    assert not inhibited(idle("c1", "n1"), [warning, {**warning, "node": "n1"}])
    # tenant alerts that span nodes are not the node's to hold back
    slo = _static_labels("InferenceQueueSloBreach", slo="queue", cluster_id="c1", endpoint_id="e1")
    assert not inhibited(slo, [source])
