"""The Prometheus alert rules, their promtool unit tests and the Alertmanager routing, checked
with the real tools (Debian's `prometheus` and `prometheus-alertmanager` packages), plus two
contracts no tool checks: every series a rule reads is one gpuledger exports, and every
alert's owner is routed to that owner's receiver."""

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
