"""Daily charts: well-formed SVG with a title, legend and axis labels, one bar group per day,
tooltips that carry the numbers drawn, nothing to fetch or run; and the statement around them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest

from gpuledger.ledger.chart import cost_chart, daily_charts, hours_chart
from gpuledger.ledger.statement import render_statement

NS = {"s": "http://www.w3.org/2000/svg"}
DAILY = [{"day": "2026-10-01", "guaranteed_gpu_hours": 12.0, "borrowed_gpu_hours": 6.0, "idle_gpu_hours": 9.0,
          "gpu_hour_cost": 30.0},
         {"day": "2026-10-02", "guaranteed_gpu_hours": 24.0, "borrowed_gpu_hours": 6.25, "idle_gpu_hours": 10.5,
          "gpu_hour_cost": 66.05},
         {"day": "2026-10-03", "guaranteed_gpu_hours": 12.0, "borrowed_gpu_hours": 0.0, "idle_gpu_hours": 0.0,
          "gpu_hour_cost": 36.0}]


def _number(title: str) -> float:
    """The number a bar's tooltip states (the date before it has no decimal point)."""
    return float(re.findall(r"\d+\.\d+", title)[0])


def _bars(svg: ET.Element) -> list[dict[str, ET.Element]]:
    groups = svg.findall(".//s:g[@class='day']", NS)
    return [{r.get("class").split()[1]: r for r in g.findall("s:rect", NS)} for g in groups]


def test_hours_chart_structure_and_numbers():
    svg = ET.fromstring(hours_chart(DAILY))
    assert svg.tag == "{http://www.w3.org/2000/svg}svg" and svg.get("role") == "img"
    assert svg.find("s:title", NS).text == "GPU-hours per day"
    assert svg.find("s:text[@class='chart-title']", NS).text == "GPU-hours per day"
    legend = [t.text for t in svg.findall("s:g[@class='legend']/s:text", NS)]
    assert legend == ["guaranteed (within quota)", "borrowed (over quota)", "idle (held, devices did no work)"]
    labels = {t.get("class"): t.text for t in svg.findall("s:text", NS) if "axis-label" in t.get("class", "")}
    assert labels == {"axis-label x": "day (UTC, month-day)", "axis-label y": "GPU-hours"}
    days = svg.findall(".//s:g[@class='day']", NS)
    assert [g.get("data-day") for g in days] == [d["day"] for d in DAILY]
    for bars, d in zip(_bars(svg), DAILY):
        assert set(bars) == {"guaranteed", "borrowed", "idle"}
        for key in ("guaranteed", "borrowed", "idle"):
            title = bars[key].find("s:title", NS).text
            assert title.startswith(d["day"]) and _number(title) == d[f"{key}_gpu_hours"]


def test_bar_heights_are_proportional_and_stacked():
    svg = ET.fromstring(hours_chart(DAILY))
    bars = _bars(svg)
    height = lambda r: float(r.get("height"))  # noqa: E731
    assert height(bars[1]["guaranteed"]) == pytest.approx(2 * height(bars[0]["guaranteed"]), abs=0.02)
    assert height(bars[2]["borrowed"]) == 0
    g, b = bars[1]["guaranteed"], bars[1]["borrowed"]
    assert float(b.get("y")) + height(b) == pytest.approx(float(g.get("y")), abs=0.02)  # borrowed sits on guaranteed
    # the y axis reaches a round number at or above the tallest stack (30.25 h -> 50)
    ticks = [t.text for t in svg.findall("s:text", NS) if t.get("class") == "tick y"]
    assert ticks[-1] == "50" and ticks[0] == "0"


def test_cost_chart_numbers_and_sum():
    svg = ET.fromstring(cost_chart(DAILY, "EUR"))
    assert svg.find("s:title", NS).text == "GPU-hour charges per day (EUR)"
    titles = [bars["cost"].find("s:title", NS).text for bars in _bars(svg)]
    assert [_number(t) for t in titles] == [d["gpu_hour_cost"] for d in DAILY]
    assert sum(Decimal(re.search(r"charges ([\d.]+) EUR", t).group(1)) for t in titles) == Decimal("132.05")


def test_charts_need_nothing_outside_the_page():
    html = daily_charts(DAILY, "EUR")
    assert html.count("<svg") == 2 and "<script" not in html and "href" not in html and "url(" not in html
    assert daily_charts(DAILY, None).count("<svg") == 1  # no currency: no charges chart
    assert daily_charts([], "EUR") == ""


def _ledger(guaranteed: str = "48.000000") -> dict:
    line = {"payer": "tenant", "tenant_id": "t1", "charge_class": "Regular", "sku_id": "A100", "unit": "gpu_hour",
            "description": "guaranteed A100 GPU-hours", "corrects_period": None}
    return {"period": "2026-10", "period_start": "2026-10-01T00:00:00Z", "period_end": "2026-11-01T00:00:00Z",
            "status": "closed", "ratecard_version": "v1", "currency": "EUR", "hash": "sha256:abc",
            "billing_policy": {"bill_confidence": ["high", "medium"]},
            "lines": [{**line, "component": "guaranteed", "quantity": guaranteed, "rate": "2.50", "amount": "120.00"},
                      {**line, "component": "borrowed", "quantity": "12.250000", "rate": "1.00", "amount": "12.05"}],
            "tenants": [{"tenant_id": "t1", "total": "132.05", "guaranteed_gpu_hours": guaranteed,
                         "borrowed_gpu_hours": "12.250000", "idle_allocated_gpu_hours": "19.500000",
                         "allocated_gpu_hours": "60.250000", "confidence_gpu_hours": {"high": "60.250000"}}]}


def test_statement_draws_the_days_next_to_its_lines():
    page = render_statement(_ledger(), "t1", DAILY)
    svgs = [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", page, re.S)]
    assert [s.get("id") for s in svgs] == ["chart-hours", "chart-cost"]
    assert all(len(s.findall(".//s:g[@class='day']", NS)) == 3 for s in svgs)
    assert page.index("Total for 2026-10") < page.index("<svg") < page.index("Why idle reserved capacity")
    assert "@media print" in page and "print-color-adjust: exact" in page
    assert "the days add up to 132.05 EUR" in page and "daily-differs" not in page


def test_statement_says_when_the_days_differ_from_the_close():
    page = render_statement(_ledger(guaranteed="47.000000"), "t1", DAILY)
    assert "id='daily-differs'" in page and "guaranteed GPU-hours differ from what this period closed with" in page


def test_statement_without_days_has_no_chart():
    page = render_statement(_ledger(), "t1")
    assert "<svg" not in page and "Day by day" not in page


def test_statement_shows_the_capacity_the_cluster_took_back():
    doc = _ledger()
    assert "id='reclaimed'" not in render_statement(doc, "t1")
    doc["tenants"][0]["reclaimed_gpu_hours"] = {"preempted": "6.000000", "preempted_borrowed": "4.500000",
                                                "evicted": "0.000000", "evicted_borrowed": "0.000000"}
    page = render_statement(doc, "t1")
    section = page[page.index("id='reclaimed'"):page.index("How sure")]
    assert "<td>preempted</td><td class='num'>6.000000</td><td class='num'>4.500000</td>" in section
    assert "evicted" not in section.split("</p>", 1)[1]  # no row for an outcome that did not happen
    assert "reclaimed-by-class" not in section  # a document closed before the classes were kept


def test_statement_shows_the_capacity_taken_back_per_gpu_class():
    doc = _ledger()
    doc["tenants"][0]["reclaimed_gpu_hours"] = {
        "preempted": "8.000000", "preempted_borrowed": "5.333333", "evicted": "3.000000", "evicted_borrowed": "3.000000",
        "by_class": {"A100": {"evicted": "3.000000", "evicted_borrowed": "3.000000"},
                     "H100": {"preempted": "8.000000", "preempted_borrowed": "5.333333"}}}
    page = render_statement(doc, "t1")
    table = page[page.index("id='reclaimed-by-class'"):page.index("How sure")].split("</table>", 1)[0]
    assert re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td class='num'>(.*?)</td><td class='num'>(.*?)</td></tr>",
                      table) == [("A100", "evicted", "3.000000", "3.000000"), ("H100", "preempted", "8.000000", "5.333333")]
