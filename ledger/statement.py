"""A tenant's monthly statement as a printable HTML page (pure): every line with its basis,
the period day by day (inline SVG charts, ledger/chart.py), why idle reserved capacity still
costs, confidence, and the ledger hash to verify against."""

from __future__ import annotations

from decimal import Decimal
from html import escape

from gpuledger.ledger.chart import CHART_CSS, daily_charts

__all__ = ["StatementError", "render_statement"]


class StatementError(ValueError):
    """The ledger has no lines for the tenant."""


_CSS = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 2.5em; color: #1d2330; font-size: 13px; }
h1 { font-size: 22px; margin-bottom: 0.2em; } h2 { font-size: 15px; margin-top: 2em; }
.meta { color: #4a5468; } table { border-collapse: collapse; width: 100%; margin-top: 0.8em; }
th, td { border-bottom: 1px solid #d5dae3; padding: 5px 8px; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.total td { font-weight: bold; border-top: 2px solid #1d2330; }
.hash { font-family: "DejaVu Sans Mono", monospace; font-size: 11px; word-break: break-all; }
.note { background: #f4f6fa; border-left: 4px solid #5b7bd5; padding: 0.6em 1em; }
@media print { body { margin: 1cm; } }
""" + CHART_CSS


def _basis(ln: dict, currency: str) -> str:
    q, rate = Decimal(ln["quantity"]), ln["rate"]
    if ln["unit"] == "gpu_hour":
        return f"{q:,.6f} GPU-hours × {rate} {currency}/GPU-hour"
    if ln["unit"] == "million_tokens":
        return f"{q * 1_000_000:,.0f} tokens × {rate} {currency} per million"
    if ln["unit"] == "share":
        what = "platform overhead" if ln["component"] == "overhead" else f"endpoint {ln['sku_id']} cost"
        return f"share {q:.6f} of {rate} {currency} {what}"
    return escape(ln["description"])


def _rows(lines: list[dict], currency: str) -> str:
    return "\n".join(
        f"<tr><td>{escape(ln['component'].replace('_', ' '))}</td><td>{escape(ln['sku_id'])}</td>"
        f"<td>{escape(_basis(ln, currency))}<br><small>{escape(ln['description'])}</small></td>"
        f"<td class='num'>{escape(ln['amount'])}</td></tr>" for ln in lines)


def _approval(doc: dict) -> str:
    a = doc.get("approval")
    if not a:
        return ""
    return (f" (prepared by {escape(a['prepared_by'])} on {escape(a['prepared_at'])}, approved by "
            f"{escape(a['approved_by'])} on {escape(a['approved_at'])})")


_CLOSED_HOURS = (("guaranteed", "guaranteed_gpu_hours"), ("borrowed", "borrowed_gpu_hours"),
                 ("idle", "idle_allocated_gpu_hours"))  # daily key prefix, the closed summary's key


def _listed(items: list[str]) -> str:
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def _days(daily: list[dict] | None, summary: dict, lines: list[dict], currency: str) -> str:
    """The daily charts, what they add up to, and whether that is what the period closed with."""
    if not daily:
        return ""
    held = sum((Decimal(ln["amount"]) for ln in lines if ln["charge_class"] == "Regular"
                and ln["component"] in ("guaranteed", "borrowed")), Decimal(0))
    cost = sum((Decimal(str(d["gpu_hour_cost"] or 0)) for d in daily), Decimal(0))
    priced = bool(currency) and any(d["gpu_hour_cost"] is not None for d in daily)
    differs = [f"{k} GPU-hours" for k, key in _CLOSED_HOURS  # the summary is to 1e-6 h
               if abs(sum(d[f"{k}_gpu_hours"] for d in daily) - float(summary.get(key, "0"))) > 5e-6]
    if priced and cost != held:
        differs.append("GPU-hour charges")
    note = ""
    if differs:
        note = (f"<p class='note' id='daily-differs'>The days are drawn from the evidence as it stands now; their "
                f"{escape(_listed(differs))} differ from what this period closed with, because evidence arrived "
                f"after the close. The closed figures above are what you are charged; the difference is booked as "
                f"corrections in a later statement.</p>")
    money = (f" The charges chart shows only the guaranteed and borrowed GPU-hour lines (not tokens, overhead, "
             f"shared endpoints, committed quota or credits): each day is valued at the rates in force that day, "
             f"and the days add up to {cost:,.2f} {escape(currency)}.") if priced else ""
    return (f"<h2>Day by day</h2><p>GPU-hours per UTC day. The guaranteed and borrowed bars add up to the "
            f"period's guaranteed and borrowed GPU-hours; beside them, idle is the part of those hours the devices "
            f"did no work.{money}</p>{note}{daily_charts(daily, currency if priced else None)}")


def _reclaimed_by_class(by_class: dict) -> str:
    """The reclaimed GPU-hours per GPU class and outcome (a document closed before they were
    kept per class has none)."""
    rows = [(c, o, v[o], v[o + "_borrowed"]) for c, v in sorted(by_class.items())
            for o in ("preempted", "evicted") if Decimal(v.get(o, "0"))]
    return "" if not rows else (
        "<table id='reclaimed-by-class'><tr><th>GPU class</th><th>outcome</th><th class='num'>GPU-hours held</th>"
        "<th class='num'>of which borrowed</th></tr>"
        + "".join(f"<tr><td>{escape(c)}</td><td>{o}</td><td class='num'>{escape(held)}</td>"
                  f"<td class='num'>{escape(borrowed)}</td></tr>" for c, o, held, borrowed in rows)
        + "</table>")


def render_statement(doc: dict, tenant_id: str, daily: list[dict] | None = None) -> str:
    """``daily``: the tenant's per-day series for the period (domain/daily.py), drawn as charts
    next to the lines; without it the statement has no charts."""
    mine = [ln for ln in doc["lines"] if ln["payer"] == "tenant" and ln["tenant_id"] == tenant_id]
    review = [ln for ln in doc["lines"] if ln["payer"] == "suspense" and ln["tenant_id"] == tenant_id
              and ln["charge_class"] == "Regular"]
    summary = next((t for t in doc["tenants"] if t["tenant_id"] == tenant_id), None)
    if not (mine or review) or summary is None:
        raise StatementError(f"the {doc['period']} ledger has no lines for tenant {tenant_id!r}")
    currency = doc["currency"]
    regular = [ln for ln in mine if ln["charge_class"] == "Regular"]
    corrections = [ln for ln in mine if ln["charge_class"] == "Correction"]
    guaranteed = Decimal(summary.get("guaranteed_gpu_hours", "0"))
    idle = Decimal(summary.get("idle_allocated_gpu_hours", "0"))
    allocated = Decimal(summary.get("allocated_gpu_hours", "0"))
    confidence = summary.get("confidence_gpu_hours", {})
    conf_rows = "".join(f"<tr><td>{escape(k)}</td><td class='num'>{escape(v)}</td></tr>"
                        for k, v in confidence.items())
    corr = ""
    if corrections:
        corr = (f"<h2>Corrections to closed periods</h2><p>Evidence that arrived after an earlier period was "
                f"closed. The closed ledger is never edited; the difference is booked here.</p><table>"
                f"<tr><th>component</th><th>SKU</th><th>basis</th><th class='num'>amount</th></tr>"
                f"{_rows(corrections, currency)}</table>")
    under = ""
    if review:
        under = (f"<h2>Under review (not charged)</h2><p>GPU-hours whose evidence is too weak to bill under the "
                 f"billing policy (billed: {escape(', '.join(doc.get('billing_policy', {}).get('bill_confidence', [])))})."
                 f" They are valued at the list rate and paid by no one until the platform team settles them; a "
                 f"settlement appears as its own line, or as a correction in a later statement.</p><table>"
                 f"<tr><th>component</th><th>SKU</th><th>basis</th><th class='num'>list value</th></tr>"
                 f"{_rows(review, currency)}</table>")
    reclaimed = summary.get("reclaimed_gpu_hours")
    took = "" if not reclaimed else (
        "<h2 id='reclaimed'>Capacity the cluster took back</h2><p>GPU-hours held by your pods that the scheduler "
        "preempted or the cluster evicted before they finished; the hours they held are charged like any other, "
        "and borrowed capacity is what a quota owner's claim can take back.</p><table><tr><th>outcome</th>"
        "<th class='num'>GPU-hours held</th><th class='num'>of which borrowed</th></tr>"
        + "".join(f"<tr><td>{o}</td><td class='num'>{escape(reclaimed[o])}</td>"
                  f"<td class='num'>{escape(reclaimed[o + '_borrowed'])}</td></tr>"
                  for o in ("preempted", "evicted") if Decimal(reclaimed.get(o, "0")))
        + "</table>" + _reclaimed_by_class(reclaimed.get("by_class") or {}))
    outcome = summary.get("cost_per_outcome")
    per = "" if not outcome else (
        "<h2 id='per-outcome'>What your charges bought</h2><p>The period's charges (before corrections) over what "
        "your work produced.</p><table><tr><th>outcome</th><th class='num'>count</th>"
        f"<th class='num'>charges per outcome ({escape(currency)})</th></tr>"
        + "".join(f"<tr><td>{label}</td><td class='num'>{outcome[n]:,}</td>"
                  f"<td class='num'>{escape(outcome[k] or '—')}</td></tr>"
                  for label, n, k in (("successful requests", "successful_requests", "per_successful_request"),
                                      ("output tokens (per million)", "output_tokens", "per_million_output_tokens"),
                                      ("completed jobs", "completed_jobs", "per_completed_job")))
        + "</table>")
    served = summary.get("productive_by_capacity")
    per += "" if not served else (
        "<h3 id='served-on'>Where your requests were served</h3><p>Successful requests and output tokens by the "
        "capacity the serving endpoint's owner held at the time: within its guaranteed quota, or borrowed above it "
        "(borrowed capacity can be reclaimed).</p><table><tr><th>capacity</th><th class='num'>successful requests"
        "</th><th class='num'>output tokens</th></tr>"
        + "".join(f"<tr><td>{k}</td><td class='num'>{escape(served[k]['successful_requests'])}</td>"
                  f"<td class='num'>{escape(served[k]['output_tokens'])}</td></tr>"
                  for k in ("guaranteed", "borrowed", "unknown") if k in served)
        + "</table>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Statement {escape(tenant_id)} {escape(doc['period'])}</title>
<style>{_CSS}</style></head><body>
<h1>GPU statement — tenant {escape(tenant_id)}</h1>
<p class="meta">Period {escape(doc['period'])} ({escape(doc['period_start'])} to {escape(doc['period_end'])}),
status {escape(doc['status'])}{_approval(doc)}, rate card {escape(str(doc['ratecard_version']))}, amounts in
{escape(currency)}.</p>
<h2>Charges</h2>
<table><tr><th>component</th><th>SKU</th><th>basis</th><th class="num">amount</th></tr>
{_rows(regular, currency)}
</table>
{corr}
{under}
<table><tr class="total"><td colspan="3">Total for {escape(doc['period'])}</td>
<td class="num" id="total">{escape(summary['total'])} {escape(currency)}</td></tr></table>
{_days(daily, summary, regular, currency)}
<h2>Why idle reserved capacity still costs</h2>
<p class="note">Of your {allocated:,.3f} allocated GPU-hours, {guaranteed:,.3f} were within your guaranteed quota
and {idle:,.3f} were idle (held but the devices did no work). Guaranteed capacity is reserved for you whether
or not it is busy: while you hold it, no other tenant can be promised it, so it is charged at the guaranteed
rate either way. Borrowed capacity above your quota is charged at the borrowed rate; the platform budget
funds the difference to the list rate.</p>
{took}
{per}
<h2>How sure these numbers are</h2>
<p>GPU-hours by the confidence of the evidence: <em>high</em> — the device was assigned to your pod or VM;
<em>medium</em> — a shared device with your own telemetry series; <em>modeled</em> — a time-sliced device
split evenly among its replicas.</p>
<table><tr><th>confidence</th><th class="num">GPU-hours</th></tr>{conf_rows}</table>
<h2>Verification</h2>
<p>This statement is rendered from the closed ledger with content hash</p>
<p class="hash" id="hash">{escape(doc['hash'] or '')}</p>
<p>Replay the period's evidence to rebuild the same ledger and compare the hash.</p>
</body></html>
"""
