"""Daily bar charts as inline SVG (pure): no script, no external resource, readable in print.

Two charts from a tenant's ``daily`` series (domain/daily.py): GPU-hours per day (a stacked
bar of guaranteed and borrowed hours, and beside it the idle part of those hours) and
GPU-hour charges per day (guaranteed + borrowed lines only). Each chart is one ``<svg>``
with a title, a legend, axis labels and one ``<g class="day">`` per day whose bars carry a
``<title>`` (a tooltip on screen) with the exact number drawn.
"""

from __future__ import annotations

import math
from html import escape

__all__ = ["CHART_CSS", "cost_chart", "daily_charts", "hours_chart"]

WIDTH, HEIGHT = 720, 270
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 58, 44
GUARANTEED, BORROWED, IDLE, COST = "#3b5bab", "#e0962d", "#8c94a3", "#2e8b6a"

CHART_CSS = """
figure.charts { margin: 1em 0; }
figure.charts svg { display: block; max-width: 100%; height: auto; margin-bottom: 1em; }
@media print {
  figure.charts { break-inside: avoid; page-break-inside: avoid; }
  figure.charts svg { width: 100%; print-color-adjust: exact; -webkit-print-color-adjust: exact; }
}
"""


def _nice_max(value: float) -> float:
    """The smallest 1, 2 or 5 x 10^k at or above ``value`` (1 for nothing to draw)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power


def _tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:,.2f}".rstrip("0").rstrip(".")


def _frame(chart_id: str, title: str, y_label: str, top: float, legend: list[tuple[str, str, str]],
           days: list[str]) -> list[str]:
    """Title, legend, axes, gridlines, tick and axis labels."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [f'<title id="{chart_id}-title">{escape(title)}</title>',
           f'<text class="chart-title" x="{LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
           '<g class="legend" font-size="11">']
    x = LEFT
    for key, label, fill in legend:
        out.append(f'<rect class="swatch {key}" x="{x}" y="30" width="12" height="12" fill="{fill}"/>'
                   f'<text x="{x + 16}" y="40">{escape(label)}</text>')
        x += 24 + 6.2 * len(label)
    out.append("</g>")
    for k in range(6):
        value = top * k / 5
        y = TOP + plot_h - plot_h * k / 5
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.2f}" x2="{LEFT + plot_w}" y2="{y:.2f}" '
                   f'stroke="#d5dae3" stroke-width="{1 if k else 1.5}"/>'
                   f'<text class="tick y" x="{LEFT - 6}" y="{y + 4:.2f}" font-size="10" '
                   f'text-anchor="end">{_tick(value)}</text>')
    out.append(f'<line class="axis y" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#1d2330"/>')
    every = max(1, math.ceil(len(days) / 16))
    slot = plot_w / max(1, len(days))
    for i, day in enumerate(days):
        if i % every == 0:
            out.append(f'<text class="tick x" x="{LEFT + slot * (i + 0.5):.2f}" y="{TOP + plot_h + 14}" '
                       f'font-size="10" text-anchor="middle">{escape(day[5:])}</text>')
    out.append(f'<text class="axis-label x" x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" font-size="11" '
               f'text-anchor="middle">day (UTC, month-day)</text>'
               f'<text class="axis-label y" x="14" y="{TOP + plot_h / 2}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 14 {TOP + plot_h / 2})">{escape(y_label)}</text>')
    return out


def _svg(chart_id: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" id="{chart_id}" class="daily-chart" role="img" '
            f'aria-labelledby="{chart_id}-title" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'font-family="DejaVu Sans, Arial, sans-serif">' + "".join(body) + "</svg>")


def _bar(key: str, x: float, y: float, w: float, h: float, fill: str, tip: str) -> str:
    return (f'<rect class="bar {key}" x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" fill="{fill}">'
            f'<title>{escape(tip)}</title></rect>')


def hours_chart(daily: list[dict], chart_id: str = "chart-hours") -> str:
    """Guaranteed and borrowed GPU-hours stacked per day; beside them the idle part."""
    days = [d["day"] for d in daily]
    top = _nice_max(max((max(d["guaranteed_gpu_hours"] + d["borrowed_gpu_hours"], d["idle_gpu_hours"])
                         for d in daily), default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(days))
    scale = plot_h / top
    body = _frame(chart_id, "GPU-hours per day", "GPU-hours", top,
                  [("guaranteed", "guaranteed (within quota)", GUARANTEED),
                   ("borrowed", "borrowed (over quota)", BORROWED),
                   ("idle", "idle (held, devices did no work)", IDLE)], days)
    base = TOP + plot_h
    for i, d in enumerate(daily):
        x = LEFT + slot * i + slot * 0.1
        g, b, idle = d["guaranteed_gpu_hours"], d["borrowed_gpu_hours"], d["idle_gpu_hours"]
        hg, hb, hi = g * scale, b * scale, idle * scale
        body.append(f'<g class="day" data-day="{escape(d["day"])}">'
                    + _bar("guaranteed", x, base - hg, slot * 0.5, hg, GUARANTEED,
                           f'{d["day"]}: guaranteed {g:.6f} GPU-hours')
                    + _bar("borrowed", x, base - hg - hb, slot * 0.5, hb, BORROWED,
                           f'{d["day"]}: borrowed {b:.6f} GPU-hours')
                    + _bar("idle", x + slot * 0.5, base - hi, slot * 0.3, hi, IDLE,
                           f'{d["day"]}: idle {idle:.6f} GPU-hours (of the held hours)')
                    + "</g>")
    return _svg(chart_id, body)


def cost_chart(daily: list[dict], currency: str, chart_id: str = "chart-cost") -> str:
    """GPU-hour charges (guaranteed + borrowed lines) per day."""
    days = [d["day"] for d in daily]
    top = _nice_max(max((d["gpu_hour_cost"] or 0.0 for d in daily), default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(days))
    scale = plot_h / top
    body = _frame(chart_id, f"GPU-hour charges per day ({currency})", currency, top,
                  [("cost", "guaranteed + borrowed GPU-hour charges", COST)], days)
    base = TOP + plot_h
    for i, d in enumerate(daily):
        cost = d["gpu_hour_cost"] or 0.0
        h = cost * scale
        body.append(f'<g class="day" data-day="{escape(d["day"])}">'
                    + _bar("cost", LEFT + slot * i + slot * 0.15, base - h, slot * 0.7, h, COST,
                           f'{d["day"]}: GPU-hour charges {cost:.2f} {currency}')
                    + "</g>")
    return _svg(chart_id, body)


def daily_charts(daily: list[dict], currency: str | None) -> str:
    """Both charts in a ``<figure>`` (the charges chart only with a currency and a priced series)."""
    if not daily:
        return ""
    charts = [hours_chart(daily)]
    if currency and any(d["gpu_hour_cost"] is not None for d in daily):
        charts.append(cost_chart(daily, currency))
    return '<figure class="charts">' + "\n".join(charts) + "</figure>"
