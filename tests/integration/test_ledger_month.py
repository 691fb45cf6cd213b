"""Acceptance (ledger, replay): a month with known truth closes to the cent; both
reconciliation identities hold exactly; re-closing is a no-op; replaying the closed month
reproduces its hash; a late PodResources snapshot after the close shows as exactly the
expected diff lines and becomes correction lines in the next close, and the closed
ledger's hash does not change; the FOCUS export passes a column-and-type check; the
statement renders in headless Chromium.

Truth is in tests/plans.py (``month_plan``): October 2026 at hourly evidence, with node-b's
snapshots at 301, 302 and 303 h held back until after October is closed.
"""

from __future__ import annotations

import csv
import io
import math
import re
import shutil
import subprocess
import uuid
from datetime import datetime
from decimal import Decimal
from xml.etree import ElementTree

import orjson
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from captures import split_lines
from focus_check import UNDECIDABLE, validate_focus
from conftest import BOOTSTRAP, REPO, Stack
from gpuledger.demo.cluster import write_capture
from gpuledger.domain.approval import seal_hash, verify
from gpuledger.domain.ledger import NORMALIZATION_VERSION
from gpuledger.domain.rows import canonical_sha256
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.ledger.focus import FOCUS_COLUMNS
from gpuledger.sinks.clickhouse import ClickHouseStore
from plans import GAP_HOURS, H, MONTH_CREDITS, OCTOBER_RECONCILIATION, OCTOBER_TOTALS, T0, month_plan

pytestmark = pytest.mark.integration

# late snapshots arrive after October closed (the capture runs into December): the allowed
# lateness covers that, so they still fill their gaps (with the default hour they would be
# counted stale, and memory stays small)
MONTH_ENV = {"GPULEDGER_PODRESOURCES_GRACE_S": "7200", "GPULEDGER_STALE_CEILING_S": "7200",
             "GPULEDGER_ALLOWED_LATENESS_S": str(90 * 24 * 3600)}
ARTIFACTS = REPO / "test-artifacts"


def _late(line: dict) -> bool:
    return line["node"] == "node-b" and parse_rfc3339_ms(line["observed_at"]) in {T0 + h * H for h in GAP_HOURS}


@pytest.fixture(scope="module")
def month(broker, tmp_path_factory):
    """October closed on the capture without node-b's two late snapshots."""
    root = tmp_path_factory.mktemp("month")
    full = write_capture(month_plan(), root / "full")
    (full / "credits.json").write_bytes(orjson.dumps(MONTH_CREDITS))
    assert split_lines(full, root / "early", root / "late", "podresources.jsonl", _late) == len(GAP_HOURS)
    stack = Stack(root / "home", f"t{uuid.uuid4().hex[:10]}", MONTH_ENV)
    ingested = stack.run("ingest", str(root / "early")).stdout
    assert "rejected (dead-lettered) lines: 0" in ingested, ingested
    processed = stack.run("process", "--until-caught-up").stderr
    prepared = stack.run("close", "--period", "2026-10", "--by", "pat", check=False)
    assert prepared.returncode == 0, ingested + processed[-3000:] + prepared.stderr
    steps = {"prepared": orjson.loads(prepared.stdout),
             "own": stack.run("close", "--period", "2026-10", "--approve", "--by", "pat", check=False),
             "unapproved_show": stack.run("ledger", "show", "--period", "2026-10", check=False)}
    closed = stack.run("close", "--period", "2026-10", "--approve", "--by", "quinn", check=False)
    assert closed.returncode == 0, closed.stdout + closed.stderr
    return stack, root, orjson.loads(closed.stdout), steps


def close(stack: Stack, period: str) -> dict:
    """Prepare and approve, by two people."""
    stack.run("close", "--period", period, "--by", "pat")
    return orjson.loads(stack.run("close", "--period", period, "--approve", "--by", "quinn").stdout)


def test_october_closes_to_the_cent(month):
    _, _, doc, _ = month
    assert doc["format"] == "gpuledger-ledger/1" and doc["status"] == "closed" and doc["hash"].startswith("sha256:")
    assert doc["ratecard_version"] == "2026-10-v1" and doc["currency"] == "USD"
    # the source systems' versions, from the DCGM topic at the month's edges and the request facts
    versions = doc["source_versions"]
    assert versions["nvidia_driver"] == ["580.105.08"] and "scrapes" in versions["read"], versions
    assert versions["gpu_model"] and versions["model_revisions"], versions
    assert {t["tenant_id"]: t["total"] for t in doc["tenants"]} == OCTOBER_TOTALS
    r = doc["reconciliation"]
    assert {k: r[k] for k in OCTOBER_RECONCILIATION} == OCTOBER_RECONCILIATION
    d = {k: Decimal(v) for k, v in r.items() if isinstance(v, str)}
    assert d["physical_gpu_hours"] == (d["allocated_gpu_hours"] + d["unallocated_gpu_hours"]
                                       + d["unavailable_gpu_hours"] + d["difference_gpu_hours"])
    assert d["recoverable_cost"] == d["tenant_charges"] + d["central_charges"] + d["subsidies"] - d["credits"]
    # every line is its basis: quantity x rate, in cents; money is decimal strings, never floats
    for line in doc["lines"]:
        if line["unit"] in ("gpu_hour", "million_tokens"):
            assert Decimal(line["amount"]) == (Decimal(line["quantity"]) * Decimal(line["rate"])).quantize(
                Decimal("0.01")), line
    alpha = {(ln["component"], ln["sku_id"]): ln for ln in doc["lines"] if ln["tenant_id"] == "alpha"
             and ln["payer"] == "tenant"}
    assert alpha[("guaranteed", "H100-80GB")]["quantity"] == "1488.000000"
    assert alpha[("borrowed", "H100-80GB")]["amount"] == "1116.00"
    assert alpha[("credit", "cr-2026-10-alpha-sla")]["amount"] == "-100.00"
    assert {t["tenant_id"] for t in doc["tenant_hierarchy"]} == {"alpha", "beta", "gamma"}
    assert any(g["kind"] == "physical_without_evidence" and g["gpu_hours"] == "12.000000" for g in doc["data_gaps"])
    assert doc["sources"] and all(s["last_offset"] >= s["first_offset"] >= 0 for s in doc["sources"])
    assert Decimal(doc["confidence_gpu_hours"]["high"]) == Decimal("3126.000000")


def test_the_closed_month_names_the_documents_it_was_priced_with(month):
    """The rate card, quotas, credits and inventory in force by the canonical hash of the
    documents published (the capture's files); the approved GPUs and unavailability of the
    month by a hash of their own."""
    _, root, doc, _ = month
    calc = doc["calculation"]
    assert calc["normalization_version"] == NORMALIZATION_VERSION
    used = calc["reference_documents"]
    for kind in ("ratecards", "quotas", "credits", "inventory"):
        assert used[kind] == [canonical_sha256(orjson.loads((root / "full" / f"{kind}.json").read_bytes()))], kind
    assert used["endpoints"] == [] and used["suspense"] == []  # none published
    assert calc["inventory_entries"].startswith("sha256:") and len(calc["inventory_entries"]) == 71
    # each tenant's days are in the hashed document, and add up to its closed GPU-hour charges
    for t in doc["tenants"]:
        assert [d["day"] for d in t["daily"]] == [f"2026-10-{i:02d}" for i in range(1, 32)], t["tenant_id"]
        charged = sum(Decimal(ln["amount"]) for ln in doc["lines"] if ln["tenant_id"] == t["tenant_id"]
                      and ln["payer"] == "tenant" and ln["component"] in ("guaranteed", "borrowed"))
        assert sum(Decimal(d["gpu_hour_cost"]) for d in t["daily"]) == charged, t["tenant_id"]


def test_cost_per_outcome_in_the_closed_month(month):
    """By hand from the plan: alpha's 6,970.50 over 2 successful requests and 1 M output tokens
    (its pod runs past October: no job completed); beta's 755.00 and gamma's 1,782.00 each
    over one completed job (their pods finish on the 17th and the 21st)."""
    stack, _, doc, _ = month
    got = {t["tenant_id"]: t["cost_per_outcome"] for t in doc["tenants"]}
    assert got["alpha"] == {"successful_requests": 2, "output_tokens": 1_000_000, "completed_jobs": 0,
                            "per_successful_request": "3485.250000", "per_million_output_tokens": "6970.500000",
                            "per_completed_job": None}
    assert (got["beta"]["completed_jobs"], got["beta"]["per_completed_job"]) == (1, "755.000000")
    assert (got["gamma"]["completed_jobs"], got["gamma"]["per_completed_job"]) == (1, "1782.000000")
    statement = stack.run("statement", "--period", "2026-10", "--tenant", "gamma").stdout
    section = statement[statement.index("id='per-outcome'"):statement.index("How sure")]
    assert "<td>completed jobs</td><td class='num'>1</td><td class='num'>1782.000000</td>" in section


def test_two_step_close_records_who_prepared_and_who_approved(month):
    _, _, doc, steps = month
    prepared = steps["prepared"]
    assert prepared["status"] == "prepared" and prepared["prepared"]["by"] == "pat"
    assert prepared["hash"] == doc["hash"]  # the evidence hash: the approval does not change it
    assert steps["unapproved_show"].returncode != 0 and "is not closed" in steps["unapproved_show"].stderr
    own = steps["own"]
    assert own.returncode == 2 and "pat prepared 2026-10 and may not approve it too" in own.stdout, own.stdout
    approval = doc["approval"]
    assert (approval["prepared_by"], approval["approved_by"]) == ("pat", "quinn")
    assert approval["approved_at"] >= approval["prepared_at"] and approval["prepared_against"] == []
    assert "prepared" not in doc and doc["seal"] == seal_hash(doc) and verify(doc) == []
    edited = {**doc, "approval": {**approval, "approved_by": "mallory"}}
    assert verify(edited) == [f"seal {doc['seal']} is not {seal_hash(edited)}: the closed document was edited"]


def test_approving_again_is_a_no_op(month):
    stack, _, doc, _ = month
    again = stack.run("close", "--period", "2026-10", "--approve", "--by", "quinn")
    assert again.stdout.strip() == doc["hash"]
    assert orjson.loads(stack.run("ledger", "show", "--period", "2026-10").stdout) == doc


def test_closing_again_is_a_no_op_that_prints_the_hash(month):
    stack, _, doc, _ = month
    again = stack.run("close", "--period", "2026-10")
    assert again.stdout.strip() == doc["hash"]
    shown = orjson.loads(stack.run("ledger", "show", "--period", "2026-10").stdout)
    assert shown == doc


def test_focus_export_columns_and_types(month):
    stack, _, doc, _ = month
    text = stack.run("export", "focus", "--period", "2026-10").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == FOCUS_COLUMNS and len(rows) == len(doc["lines"])
    categories = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
    for row in rows:
        for money in ("BilledCost", "ContractedCost", "EffectiveCost", "ListCost", "PricingQuantity"):
            Decimal(row[money])  # a decimal, or this raises
        for when in ("BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"):
            assert datetime.fromisoformat(row[when].replace("Z", "+00:00")).utcoffset().total_seconds() == 0
        assert row["BillingPeriodStart"] == "2026-10-01T00:00:00Z" and row["BillingPeriodEnd"] == "2026-11-01T00:00:00Z"
        assert row["ChargeCategory"] in categories and row["ChargeClass"] in ("", "Correction")
        assert row["BillingCurrency"] == "USD" and row["SkuId"] and row["ServiceName"] and row["ProviderName"]
        assert isinstance(orjson.loads(row["Tags"]), dict)
        assert (row["ConsumedQuantity"] == "") == (row["ConsumedUnit"] == "")
        if row["ChargeCategory"] != "Usage":
            assert row["ConsumedQuantity"] == ""
    billed = {}
    for row in rows:
        billed[row["BillingAccountId"]] = billed.get(row["BillingAccountId"], Decimal(0)) + Decimal(row["BilledCost"])
    assert {t: str(billed[t]) for t in OCTOBER_TOTALS} == OCTOBER_TOTALS


def test_focus_export_passes_the_finops_foundation_validator(month, tmp_path):
    stack, _, doc, _ = month
    export = tmp_path / "focus-2026-10.csv"
    stack.run("export", "focus", "--period", "2026-10", "--out", str(export))
    failed, passed = validate_focus(export, tmp_path)
    assert failed == UNDECIDABLE, sorted(failed)
    assert "InvoiceId-C-003-C" in passed and len(passed) >= 130, len(passed)
    for rule in ("ChargeFrequency-C-000-O", "InvoiceId-C-000-O", "ServiceSubcategory-C-000-O", "PricingUnit-C-000-M"):
        assert rule in passed, rule
    assert len(list(csv.DictReader(export.open()))) == len(doc["lines"])


def test_unused_guaranteed_hours_in_the_showback(month):
    """alpha's quota of 2 GPUs is used in full (it holds 3 all month); gamma's 1 GPU (744 h)
    is used while it holds GPUs, 200..500 h less the 3 h of held-back snapshots: 297 h used,
    447 h unused, 1117.50 at the 2.50 list rate. beta has no quota."""
    stack = month[0]
    doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    alpha = tenants["alpha"]["entitlement"]
    assert alpha["by_class"]["H100-80GB"] == {"entitled_gpu_hours": 1488.0, "used_gpu_hours": pytest.approx(1488.0),
                                              "unused_gpu_hours": pytest.approx(0.0, abs=1e-6),
                                              "unused_list_value": 0.0}
    gamma = tenants["gamma"]["entitlement"]
    assert (gamma["unused_guaranteed_gpu_hours"], gamma["unused_guaranteed_list_value"]) == (
        pytest.approx(447.0, abs=1e-6), 1117.50)
    assert gamma["by_class"]["H100-80GB"]["used_gpu_hours"] == pytest.approx(297.0, abs=1e-6)
    assert tenants["beta"]["entitlement"] is None


def _october(hours: dict[int, float]) -> list[float]:
    """31 days of October from {day of month: hours}, zero elsewhere."""
    return [hours.get(day, 0.0) for day in range(1, 32)]


def test_showback_days_add_up_to_the_period(month):
    """Per UTC day, by hand from the plan: alpha holds 3 GPUs on a quota of 2 (48 h guaranteed,
    24 h borrowed, 48 x 2.50 + 24 x 1.50 = 156.00 a day); beta (no quota) 100..400 h, all
    borrowed at 1.50 (20 h on Oct 5, 24 h to Oct 16, 16 h on Oct 17); gamma 2 GPUs on a quota of
    1 at 200..500 h without the 3 held-back hours 301..304 (16 h on Oct 9, 21 h on Oct 13, 20 h
    on Oct 21), each hour guaranteed on one GPU and borrowed on the other (4.00 an hour)."""
    doc = orjson.loads(month[0].run("showback", "--period", "2026-10", "--format", "json").stdout)
    tenants = {t["tenant_id"]: t for t in doc["tenants"]}
    beta = {5: 20.0, **{d: 24.0 for d in range(6, 17)}, 17: 16.0}
    gamma = {9: 16.0, **{d: 24.0 for d in range(10, 21)}, 13: 21.0, 21: 20.0}
    truth = {"alpha": (_october(dict.fromkeys(range(1, 32), 48.0)), _october(dict.fromkeys(range(1, 32), 24.0)),
                       _october(dict.fromkeys(range(1, 32), 156.0))),
             "beta": (_october({}), _october(beta), _october({d: h * 1.5 for d, h in beta.items()})),
             "gamma": (_october(gamma), _october(gamma), _october({d: h * 4 for d, h in gamma.items()}))}
    for tid, (guaranteed, borrowed, cost) in truth.items():
        e, days = tenants[tid], tenants[tid]["daily"]
        assert [d["day"] for d in days] == [f"2026-10-{i:02d}" for i in range(1, 32)]
        assert [d["guaranteed_gpu_hours"] for d in days] == pytest.approx(guaranteed, abs=1e-6), tid
        assert [d["borrowed_gpu_hours"] for d in days] == pytest.approx(borrowed, abs=1e-6), tid
        assert [d["gpu_hour_cost"] for d in days] == cost, tid
        # the days add up to the period: hours to float noise, charges to the cent
        assert sum(d["guaranteed_gpu_hours"] for d in days) == pytest.approx(e["guaranteed_gpu_hours"], abs=1e-9)
        assert sum(d["borrowed_gpu_hours"] for d in days) == pytest.approx(e["borrowed_gpu_hours"], abs=1e-9)
        assert sum(d["idle_gpu_hours"] for d in days) == pytest.approx(e["idle_allocated_gpu_hours"], abs=1e-9)
        assert sum(Decimal(str(d["gpu_hour_cost"])) for d in days) == (
            Decimal(str(e["cost"]["guaranteed"])) + Decimal(str(e["cost"]["borrowed"])))
        for d in days:  # idle is part of the hours held that day
            assert 0 <= d["idle_gpu_hours"] <= d["guaranteed_gpu_hours"] + d["borrowed_gpu_hours"] + 1e-9, (tid, d)
    assert min(d["idle_gpu_hours"] for d in tenants["alpha"]["daily"]) > 0  # SM-active about 0.7 of 72 h


def test_statement_renders_in_headless_chromium(month):
    stack, root, doc, _ = month
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium package is needed: `make setup` installs it (apt-get install chromium)"
    page = root / "statement-alpha.html"
    stack.run("statement", "--period", "2026-10", "--tenant", "alpha", "--out", str(page))
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "statement-alpha-2026-10.png"
    shot.unlink(missing_ok=True)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={root / 'chrome'}"]
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1100,1500", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    assert doc["hash"] in dom and "6970.50 USD" in dom and "Why idle reserved capacity still costs" in dom
    assert "prepared by pat on " in dom and "approved by quinn on " in dom
    assert "1,488.000000 GPU-hours × 2.50 USD/GPU-hour" in dom
    # the day-by-day charts: inline SVG, one bar group per October day, tooltips with the numbers drawn
    html = page.read_text()
    svgs = [ElementTree.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", html, re.S)]
    assert [svg.get("id") for svg in svgs] == ["chart-hours", "chart-cost"] and "<svg" in dom
    ns = {"s": "http://www.w3.org/2000/svg"}
    for svg in svgs:
        assert len(svg.findall(".//s:g[@class='day']", ns)) == 31
    tips = [t.text for t in svgs[0].findall(".//s:rect/s:title", ns)]
    assert tips[:3] == ["2026-10-01: guaranteed 48.000000 GPU-hours", "2026-10-01: borrowed 24.000000 GPU-hours",
                        tips[2]] and tips[2].startswith("2026-10-01: idle ")
    costs = [t.text for t in svgs[1].findall(".//s:rect/s:title", ns)]
    assert costs == [f"2026-10-{i:02d}: GPU-hour charges 156.00 USD" for i in range(1, 32)]
    assert "the days add up to 4,836.00 USD" in html and "daily-differs" not in html  # 3,720.00 + 1,116.00


def test_replaying_the_closed_month_reproduces_its_hash(month):
    stack, _, october, _ = month
    out = orjson.loads(stack.run("replay", "--period", "2026-10", "--into", "replay_oct", "--at-close").stdout)
    if not out["same_hash"]:
        shown = stack.run("diff", "--period", "2026-10", "--against", "replay_oct", "--format", "json", check=False)
        raise AssertionError(f"replay at close gave {out['hash']}, the close {october['hash']}:\n"
                             f"{shown.stdout[-6000:]}\n{shown.stderr[-2000:]}")
    assert out["hash"] == october["hash"] and out["records"] > 5000
    assert "ETA" in stack.run("replay", "--period", "2026-10", "--into", "replay_oct", "--at-close").stderr
    same = stack.run("diff", "--period", "2026-10", "--against", "replay_oct", check=False)
    assert same.returncode == 0 and "same hash" in same.stderr


@pytest.mark.parametrize("processes", [2, 4])
def test_replay_in_parallel_gives_the_same_hash(month, processes):
    """K replay workers over disjoint units: the ledger document is byte-for-byte the one
    replay with one worker (and the close) gives."""
    stack, _, october, _ = month
    out = orjson.loads(stack.run("replay", "--period", "2026-10", "--into", f"replay_k{processes}", "--at-close",
                                 "--processes", str(processes)).stdout)
    assert out["hash"] == october["hash"] and out["records"] > 5000


def test_late_snapshot_after_close_becomes_corrections(month):
    stack, root, october, _ = month
    stack.run("ingest", str(root / "late"))
    stack.run("process", "--until-caught-up")
    # a replay of October now sees the late evidence: exactly the lines it changes differ
    stack.run("replay", "--period", "2026-10", "--into", "replay_now")
    differ = stack.run("diff", "--period", "2026-10", "--against", "replay_now", "--format", "json", check=False)
    assert differ.returncode == 1
    changed = {(d["tenant_id"], d["component"]): (d["ledger_quantity"], d["replay_quantity"], d["difference"])
               for d in orjson.loads(differ.stdout) if d["component"] != "overhead"}
    assert changed == {(None, "unallocated"): ("2790.000000", "2796.000000", "15.00"),
                       (None, "unreconciled"): ("12.000000", "0.000000", "-30.00"),
                       ("gamma", "subsidy"): ("297.000000", "300.000000", "3.00"),
                       ("gamma", "borrowed"): ("297.000000", "300.000000", "4.50"),
                       ("gamma", "guaranteed"): ("297.000000", "300.000000", "7.50")}
    pending = orjson.loads(stack.run("ledger", "corrections").stdout)
    assert pending and {ln["corrects_period"] for ln in pending} == {"2026-10"}
    closed = close(stack, "2026-11")
    assert closed["approval"]["prepared_against"] == [f"2026-10 {october['hash']}"]
    corrections = [ln for ln in closed["lines"] if ln["charge_class"] == "Correction"]
    assert [(c["tenant_id"], c["component"], c["quantity"], c["amount"]) for c in corrections
            if c["component"] in ("guaranteed", "borrowed", "unreconciled", "unallocated", "subsidy")] == [
        (None, "unallocated", "6.000000", "15.00"), (None, "unreconciled", "-12.000000", "-30.00"),
        ("gamma", "subsidy", "3.000000", "3.00"),
        ("gamma", "borrowed", "3.000000", "4.50"), ("gamma", "guaranteed", "3.000000", "7.50")]
    assert sum(Decimal(c["amount"]) for c in corrections) == 0  # October's recoverable cost is unchanged
    assert all(c["corrects_period"] == "2026-10" for c in corrections)
    assert Decimal(closed["reconciliation"]["corrections"]) == 0
    # the closed October is untouched: same document, same hash
    assert orjson.loads(stack.run("ledger", "show", "--period", "2026-10").stdout) == october
    assert stack.run("close", "--period", "2026-10").stdout.strip() == october["hash"]
    # and nothing is pending any more: the ledger plus its corrections equals the replay
    assert orjson.loads(stack.run("ledger", "corrections").stdout) == []
    assert stack.run("diff", "--period", "2026-10", "--against", "replay_now", check=False).returncode == 0


def _differences(a: object, b: object, path: str = "") -> list[str]:
    """Where two JSON values differ: anything but a float exactly, a float beyond 1e-9 (relative:
    a cent of any amount here is far more)."""
    if isinstance(a, float) and isinstance(b, (float, int)):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for k in a for d in _differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_documents_published_after_the_close_do_not_change_its_replay(month, tmp_path):
    """The reference topic keeps every document (never compacted to the latest), and so does
    the store. After a rate-card document that prices December only and an inventory with one
    more GPU from December are published, October is priced live as before, to the cent and
    by the same card, no correction is pending for it, and its replay at close reproduces its
    hash."""
    stack, root, october, _ = month
    topic = ConfigResource(ConfigResource.Type.TOPIC, f"{stack.prefix}.reference.documents")
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})  # kept: its futures resolve only while it lives
    config = {k: v.value for k, v in admin.describe_configs([topic])[topic].result().items()}
    assert (config["cleanup.policy"], config["retention.ms"], config["retention.bytes"]) == ("delete", "-1", "-1")
    before = stack.run("showback", "--period", "2026-10", "--format", "json").stdout
    pending = stack.run("ledger", "corrections").stdout
    cards = orjson.loads((root / "full" / "ratecards.json").read_bytes())
    december = [{**cards[0], "version": "2026-12-v1", "valid_from": "2026-12-01T00:00:00Z", "valid_to": None,
                 "gpu_hour": {c: {k: "9.99" for k in r} for c, r in cards[0]["gpu_hour"].items()}}]
    (tmp_path / "ratecards.json").write_bytes(orjson.dumps(december))
    inventory = orjson.loads((root / "full" / "inventory.json").read_bytes())
    added = {**inventory["gpus"][0], "gpu_uuid": "GPU-00000000-0000-0000-0000-0000000000dd",
             "valid_from": "2026-12-01T00:00:00Z", "valid_to": None}
    (tmp_path / "inventory.json").write_bytes(orjson.dumps({**inventory, "gpus": [*inventory["gpus"], added]}))
    cluster = month_plan().cluster_id
    for kind in ("ratecards", "inventory"):
        stack.run("load", kind, str(tmp_path / f"{kind}.json"), "--cluster", cluster)
    stack.run("process", "--until-caught-up")
    store = ClickHouseStore(stack.dsn)
    try:  # the store keeps both documents of each kind, the latest published first
        for kind in ("ratecards", "inventory"):
            kept = [orjson.loads(d) for _, _, d in store.reference_history(cluster, kind)]
            assert kept == [orjson.loads((d / f"{kind}.json").read_bytes()) for d in (tmp_path, root / "full")], kind
    finally:
        store.close()
    live = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
    assert live["ratecard_version"] == october["ratecard_version"] == "2026-10-v1"
    # every line and amount as before (hours from utilization sums only to float noise)
    assert _differences(live, orjson.loads(before)) == []
    assert stack.run("ledger", "corrections").stdout == pending and orjson.loads(pending) == []
    out = orjson.loads(stack.run("replay", "--period", "2026-10", "--into", "replay_after_docs", "--at-close").stdout)
    assert out["hash"] == october["hash"] and out["same_hash"]
