"""Financial consumption: the rate card applied to allocation and productive work, as
priced lines (pure).

Per rate-card window (cut at card and month edges) and GPU class, the physical capacity
is partitioned in whole micro-GPU-hours (largest remainder, so the parts add up):
tenants' guaranteed and borrowed hours by SKU (GPU class, ``class/MIG profile`` or
``class/vGPU profile``), unattributed, platform-unallocated, fragmentation, unavailable,
and ``unreconciled`` (physical minus everything the facts account for: evidence gaps, or
over-allocation when negative). Every part is priced at the card's class rates:

- tenants pay guaranteed hours x the guaranteed rate and borrowed hours x the borrowed
  rate; the class's guaranteed rate is the list rate, and central funds the difference on
  borrowed hours as a ``subsidy`` line (negative when borrowing costs more); a SKU with rates
  of its own (``gpu_hour["H100-80GB/1g.10gb"]``: a MIG or vGPU profile) is charged at them,
  and central funds their difference from the class's list rate the same way;
- unattributed capacity (allocated, but the evidence names no tenant) is suspense, per SKU
  and holder (the namespace or VM that held it), at the list rate: paid by no one until a
  decision settles it (domain/suspense.py); under a policy holding
  ``UNATTRIBUTED_TO_CENTRAL`` the central account pays it directly instead;
- the central account pays every other part at the list rate (capacity nobody held:
  platform-unallocated, fragmentation, unavailable, unreconciled);
- variable = successful requests' tokens x the per-million rates;
- a shared endpoint's cost (its GPU-hours at the owner's blended class rate) is split to
  its consumers in whole cents by weighted tokens, and credited to the owner;
- the card's overhead for the window is split in whole cents by tenants' allocated hours
  (to central when no tenant held anything);
- energy, under a card with ``energy.per_kwh``: each class's measured GPU energy
  (domain/energy.py), the tenants' parts at that rate (under review when their confidence
  does not bill), the rest central's;
- credits are negative tenant lines;
- under a card with ``committed_quota`` a tenant also pays its unused guaranteed quota at
  the guaranteed rate (``committed``), and central is credited as much
  (``commitment_recovery``): that capacity is already in a central line.

So recoverable cost (physical hours x list rate + overhead + variable - credits) equals
tenant charges + central charges + subsidies + suspense - credits, exactly, before rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal
from fractions import Fraction

from gpuledger.domain.bounds import check_rate
from gpuledger.domain.cost import RateCard, cents, overhead_pool, round_cents, signed_cents, to_decimal
from gpuledger.domain.endpoints import MICRO, largest_remainder
from gpuledger.domain.energy import energy_parts
from gpuledger.domain.quota import Quota, entitled_gpu_hours, split_skus_by_quota
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.domain.under_review import (TELEMETRY_UNKNOWN, UNATTRIBUTED_TO_CENTRAL, review_hours, split_held,
                                           unattributed_hours)

__all__ = ["CENTRAL_BUCKETS", "TELEMETRY_UNKNOWN", "UNATTRIBUTED_TO_CENTRAL", "Credit", "Line", "Priced",
           "WindowCapacity", "parse_credits", "price", "rounded"]

MILLION = Decimal(1_000_000)
# capacity no tenant was charged for, by why (see the idle classes in the showback);
# ``unattributed`` is suspense unless the policy sends it to central
CENTRAL_BUCKETS = ("unattributed", "unallocated", "fragmentation", "unavailable")


@dataclass(frozen=True)
class Line:
    payer: str  # "tenant" | "central" | "suspense"
    tenant_id: str  # the tenant charged, or the one a subsidy helped; "" for central and unattributed capacity
    component: str
    sku_id: str
    unit: str  # gpu_hour | million_tokens | share | credit
    quantity: Decimal
    rate: Decimal
    amount: Decimal  # exact; rounded only by ``rounded``
    list_amount: Decimal  # quantity x list rate
    ratecard_version: str
    from_ms: int
    to_ms: int
    description: str
    charge_class: str = "Regular"
    corrects_period: str | None = None
    holder: str = ""  # unattributed capacity: the namespace or VM that held it ("namespace/x", "vm/y")


@dataclass(frozen=True)
class Credit:
    credit_id: str
    tenant_id: str
    period: str  # YYYY-MM
    amount: Decimal
    reason: str


@dataclass(frozen=True)
class WindowCapacity:
    """Per GPU class, what the facts and the inventory say about one card window."""

    from_ms: int
    to_ms: int
    physical_ms: dict[str, int]  # class -> GPU-ms in the inventory
    buckets: dict[tuple[str, str], float]  # (class, central bucket) -> GPU-hours
    energy: tuple = ()  # (class, tenant or '' for the class's total, confidence, joules): domain/energy.py
    unattributed: tuple = ()  # (class, SKU, holder, GPU-hours): the ``unattributed`` bucket by who held it


@dataclass
class Priced:
    lines: list[Line] = field(default_factory=list)
    unpriced_gpu_hours: dict[str, float] = field(default_factory=dict)
    recoverable: Decimal = Decimal(0)  # computed from physical capacity, not from the lines
    # physical, tenant, suspense (tenants' hours under review), <buckets>, unreconciled, and
    # unattributed_suspense: the part of ``unattributed`` that is under review
    micro_gpu_hours: dict[str, int] = field(default_factory=dict)
    endpoint_cost: dict[str, Decimal] = field(default_factory=dict)
    endpoint_parts: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    tenant_hours: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (tenant, class)
    # (tenant, class) -> [entitled guaranteed GPU-hours, used, list value of the unused part]
    entitlement: dict[tuple[str, str], list] = field(default_factory=dict)
    # (tenant, class, card version) -> [entitled, used] micro-GPU-hours under a committed-quota card
    commitments: dict[tuple[str, str, str], list] = field(default_factory=dict)


def parse_credits(doc: list) -> list[Credit]:
    if not isinstance(doc, list):
        raise ValueError("credits must be a JSON list")
    out = []
    for i, c in enumerate(doc):
        try:
            reason = check_rate(c["amount"], "amount")
            if reason:
                raise ValueError(reason)
            out.append(Credit(str(c["credit_id"]), str(c["tenant_id"]), str(c["period"]), to_decimal(c["amount"]),
                              str(c.get("reason", ""))))
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as exc:
            raise ValueError(f"credits[{i}]: {exc!r}; needs credit_id, tenant_id, period and amount") from exc
    return out


def _micro(hours: float | Fraction) -> Fraction:
    return Fraction(hours) * MICRO


def _qty(micro: int) -> Decimal:
    return Decimal(micro) / MICRO


def price(windows: list[tuple[RateCard | None, WindowCapacity]], held: list[tuple], quotas: list[Quota],
          hourly_tokens: list[tuple], endpoints: list[tuple[str, str, dict[str, Fraction]]],
          endpoint_intervals: list[tuple], credits: list[Credit], credit_window: tuple[int, int],
          bill_confidence: tuple[str, ...] | None = None) -> Priced:
    """held: (tenant, class, sku, from_ms, to_ms, GPU-equivalents[, confidence, pod, covered
    share]); endpoints: (id, owner, weighted units by tenant); credits apply when their period
    starts inside ``credit_window``. Held hours of a confidence outside ``bill_confidence``
    (None: bill all), and the hours without telemetry unless it holds ``TELEMETRY_UNKNOWN``,
    are suspense (domain/suspense.py): out of the quota sweep, priced at the list rate; so is
    unattributed capacity unless it holds ``UNATTRIBUTED_TO_CENTRAL``."""
    out = Priced(micro_gpu_hours=dict.fromkeys(("physical", "tenant", "suspense", *CENTRAL_BUCKETS, "unreconciled",
                                                "unattributed_suspense"), 0))
    unattributed_review = bill_confidence is not None and UNATTRIBUTED_TO_CENTRAL not in bill_confidence
    billed, review = split_held(held, bill_confidence)
    versions = []
    for card, cap in windows:
        hours = split_skus_by_quota(billed, quotas, cap.from_ms, cap.to_ms)
        # allocation is measured on every held hour; only billing leaves the suspense out
        measured = split_skus_by_quota([h[:6] for h in held], quotas, cap.from_ms, cap.to_ms) if review else hours
        for (tenant, gpu_class, _), (g, b) in measured.items():
            tg, tb = out.tenant_hours.get((tenant, gpu_class), (0.0, 0.0))
            out.tenant_hours[(tenant, gpu_class)] = (tg + g, tb + b)
        allocated = _capacity_lines(card, cap, hours, out, review_hours(review, cap.from_ms, cap.to_ms),
                                    unattributed_hours(cap.unattributed, cap.buckets) if unattributed_review else {})
        _entitlement(card, cap, measured, quotas, out)
        if card is None:
            continue
        versions.append(card.version)
        _variable_lines(card, cap, hourly_tokens, out)
        _energy_lines(card, cap, bill_confidence, out)
        pool = overhead_pool(card, cap.from_ms, cap.to_ms)
        out.recoverable += pool
        if pool and allocated:
            whole = sum(allocated.values())
            for tenant, part in sorted(cents(pool, {t: Fraction(v) for t, v in allocated.items()}).items()):
                share = _decimal(Fraction(allocated[tenant], whole))
                out.lines.append(Line("tenant", tenant, "overhead", "overhead", "share", share, pool, part,
                                      part, card.version, cap.from_ms, cap.to_ms,
                                      "platform overhead, in proportion to allocated GPU-hours"))
        elif pool:
            out.lines.append(Line("central", "", "overhead", "overhead", "share", Decimal(1), pool, pool, pool,
                                  card.version, cap.from_ms, cap.to_ms, "platform overhead: no tenant held capacity"))
        _endpoint_cost(card, cap, hours, endpoint_intervals, out)
    version = versions[0] if versions else ""
    span = (windows[0][1].from_ms, windows[-1][1].to_ms) if windows else (0, 0)
    _endpoint_lines(endpoints, version, span, out)
    for c in credits:
        starts = parse_rfc3339_ms(f"{c.period}-01T00:00:00Z")
        if credit_window[0] <= starts < credit_window[1]:
            out.recoverable -= c.amount
            out.lines.append(Line("tenant", c.tenant_id, "credit", c.credit_id, "credit", Decimal(1), -c.amount,
                                  -c.amount, -c.amount, version, *span, c.reason or "credit"))
    return out


def _capacity_lines(card: RateCard | None, cap: WindowCapacity, hours: dict, out: Priced,
                    review: dict[tuple[str, str, str], float],
                    unattributed: dict[str, dict[tuple[str, str], Fraction]]) -> dict[str, int]:
    """Partition each priced class in micro-GPU-hours and price the parts; returns each
    tenant's billed allocated micro-GPU-hours (what overhead is split by). ``unattributed``:
    per class, the unattributed hours under review by (SKU, holder)."""
    allocated: dict[str, int] = {}
    for gpu_class in sorted({c for _, c, _ in hours} | {c for _, c, _ in review} | set(cap.physical_ms)
                            | {c for c, _ in cap.buckets}):
        rates = card.gpu_hour.get(gpu_class) if card else None
        mine = {k: v for k, v in hours.items() if k[1] == gpu_class}
        weights: dict[tuple, Fraction] = {}
        for (tenant, _, sku), (g, b) in mine.items():
            weights[("guaranteed", tenant, sku)] = Fraction(g)
            weights[("borrowed", tenant, sku)] = Fraction(b)
        for (tenant, c, sku), h in review.items():
            if c == gpu_class:
                weights[("suspense", tenant, sku)] = Fraction(h)
        for bucket in CENTRAL_BUCKETS:
            weights[(bucket,)] = Fraction(max(0.0, cap.buckets.get((gpu_class, bucket), 0.0)))
        if gpu_class in unattributed:  # under review by holder instead of one central part
            del weights[("unattributed",)]
            for (sku, holder), h in unattributed[gpu_class].items():
                weights[("unattributed", holder, sku)] = h
        accounted = round(_micro(sum(weights.values(), Fraction(0))))
        parts = largest_remainder(accounted, weights)
        physical = round(Fraction(cap.physical_ms.get(gpu_class, 0) * MICRO, 3_600_000))  # GPU-ms -> micro-GPU-h
        parts[("unreconciled",)] = physical - accounted
        out.micro_gpu_hours["physical"] += physical
        for key, micro in parts.items():
            out.micro_gpu_hours["tenant" if key[0] in ("guaranteed", "borrowed") else key[0]] += micro
            if key[0] in ("guaranteed", "borrowed"):
                allocated[key[1]] = allocated.get(key[1], 0) + micro
            elif len(key) == 3 and key[0] == "unattributed":
                out.micro_gpu_hours["unattributed_suspense"] += micro
        if rates is None:
            held_h = sum(g + b for g, b in mine.values()) + sum(h for k, h in review.items() if k[1] == gpu_class)
            if held_h:
                out.unpriced_gpu_hours[gpu_class] = out.unpriced_gpu_hours.get(gpu_class, 0.0) + held_h
            continue
        list_rate = rates.get("guaranteed", Decimal(0))
        out.recoverable += _qty(physical) * list_rate
        span = (card.version, cap.from_ms, cap.to_ms)
        for key, micro in sorted(parts.items()):
            if micro == 0:
                continue
            q = _qty(micro)
            if key[0] == "suspense":
                _, tenant, sku = key
                out.lines.append(Line("suspense", tenant, "suspense", sku, "gpu_hour", q, list_rate, q * list_rate,
                                      q * list_rate, *span, f"{sku} GPU-hours under review (evidence too weak to bill)"))
            elif len(key) == 3 and key[0] == "unattributed":
                _, holder, sku = key
                out.lines.append(Line("suspense", "", "suspense", sku, "gpu_hour", q, list_rate, q * list_rate,
                                      q * list_rate, *span, f"{sku} GPU-hours held by {holder} with no tenant, under "
                                      "review (unattributed)", holder=holder))
            elif len(key) == 3:
                kind, tenant, sku = key
                rate = card.gpu_hour.get(sku, {}).get(kind, rates.get(kind, Decimal(0)))  # the profile's, else the class's
                out.lines.append(Line("tenant", tenant, kind, sku, "gpu_hour", q, rate, q * rate, q * list_rate, *span,
                                      f"{kind} {sku} GPU-hours"))
                if rate != list_rate:
                    out.lines.append(Line("central", tenant, "subsidy", sku, "gpu_hour", q, list_rate - rate,
                                          q * (list_rate - rate), q * (list_rate - rate), *span,
                                          f"list minus {kind} rate on {tenant}'s {kind} {sku} GPU-hours"))
            else:
                out.lines.append(Line("central", "", key[0], gpu_class, "gpu_hour", q, list_rate, q * list_rate,
                                      q * list_rate, *span, f"{key[0]} {gpu_class} GPU-hours at the list rate"))
    return allocated


def _entitlement(card: RateCard | None, cap: WindowCapacity, hours: dict, quotas: list[Quota], out: Priced) -> None:
    """Guaranteed GPU-hours each tenant's quota entitled it to in the window, how many it
    used, and the list value of the rest (idle entitlement: what a committed rate would
    charge for it)."""
    used: dict[tuple[str, str], float] = {}
    for (tenant, gpu_class, _), (g, _) in hours.items():
        used[(tenant, gpu_class)] = used.get((tenant, gpu_class), 0.0) + g
    for key, entitled in entitled_gpu_hours(quotas, cap.from_ms, cap.to_ms).items():
        e = out.entitlement.setdefault(key, [0.0, 0.0, Decimal(0)])
        mine = min(used.get(key, 0.0), entitled)
        e[0] += entitled
        e[1] += mine
        rate = card.gpu_hour.get(key[1], {}).get("guaranteed") if card else None
        if rate is not None:
            e[2] += _decimal(Fraction(max(0.0, entitled - mine))) * rate
            if card.commits(key[1]):
                _committed_lines(card, cap, key, entitled, mine, rate, out)


def _committed_lines(card: RateCard, cap: WindowCapacity, key: tuple[str, str], entitled: float, used: float,
                     rate: Decimal, out: Priced) -> None:
    """Under a committed-quota card the tenant pays its unused guaranteed hours too, at the
    guaranteed rate; that capacity is already in a central line (idle at the list rate), so
    central is credited the same amount and the money identity is unchanged."""
    tenant, gpu_class = key
    c = out.commitments.setdefault((tenant, gpu_class, card.version), [0, 0])
    c[0] += round(_micro(Fraction(entitled)))
    c[1] += round(_micro(Fraction(used)))
    unused = round(_micro(Fraction(entitled) - Fraction(used)))
    if unused <= 0:
        return
    q = _qty(unused)
    span = (card.version, cap.from_ms, cap.to_ms)
    out.lines.append(Line("tenant", tenant, "committed", gpu_class, "gpu_hour", q, rate, q * rate, q * rate, *span,
                          f"unused guaranteed {gpu_class} quota: committed, charged whether used or not"))
    out.lines.append(Line("central", tenant, "commitment_recovery", gpu_class, "gpu_hour", q, -rate, -q * rate,
                          -q * rate, *span, f"idle {gpu_class} capacity recovered by {tenant}'s committed quota"))


def _variable_lines(card: RateCard, cap: WindowCapacity, hourly_tokens: list[tuple], out: Priced) -> None:
    """Tokens per tenant at the card's rates; an endpoint's service tier the card prices
    (``service_tiers``) at that tier's rates, as its own SKU (``tier/input_tokens``)."""
    tokens: dict[tuple[str, str], list[int]] = {}
    for tenant, hour_ms, tin, tout, *tier in hourly_tokens:
        if cap.from_ms <= hour_ms < cap.to_ms:
            priced_tier = tier[0] if tier and tier[0] in card.tier_tokens else ""
            t = tokens.setdefault((tenant, priced_tier), [0, 0])
            t[0], t[1] = t[0] + tin, t[1] + tout
    for (tenant, tier), (tin, tout) in sorted(tokens.items()):
        rate_in, rate_out = card.tier_tokens.get(tier, (card.per_million_input, card.per_million_output))
        for kind, n, rate in (("input_tokens", tin, rate_in), ("output_tokens", tout, rate_out)):
            if n:
                q = Decimal(n) / MILLION
                sku = f"{tier}/{kind}" if tier else kind
                out.recoverable += q * rate
                out.lines.append(Line("tenant", tenant, "variable", sku, "million_tokens", q, rate, q * rate, q * rate,
                                      card.version, cap.from_ms, cap.to_ms,
                                      f"{kind.replace('_', ' ')} per million" + (f", {tier} tier" if tier else "")))


def _energy_lines(card: RateCard, cap: WindowCapacity, bill_confidence: tuple[str, ...] | None, out: Priced) -> None:
    if card.per_kwh is None:
        return
    rate, span = card.per_kwh, (card.version, cap.from_ms, cap.to_ms)
    for gpu_class, parts in energy_parts(cap.energy, bill_confidence).items():
        out.recoverable += _qty(sum(parts.values())) * rate
        for (payer, tenant), micro in sorted(parts.items()):
            if micro:
                q = _qty(micro)
                whose = f"{tenant}'s share of " if tenant else "idle and unheld "
                out.lines.append(Line(payer, tenant, "energy", f"{gpu_class}/energy", "kwh", q, rate, q * rate, q * rate,
                                      *span, f"{whose}{gpu_class} GPU energy (kWh)"))


def _endpoint_cost(card: RateCard, cap: WindowCapacity, hours: dict, intervals: list[tuple], out: Priced) -> None:
    """An endpoint's GPU-hours in the window at its owner's blended rate for the class."""
    for ep, owner, gpu_class, f, t, fr in intervals:
        rates = card.gpu_hour.get(gpu_class)
        g = sum(v[0] for k, v in hours.items() if k[:2] == (owner, gpu_class))
        b = sum(v[1] for k, v in hours.items() if k[:2] == (owner, gpu_class))
        overlap = max(0, min(t, cap.to_ms) - max(f, cap.from_ms))
        if rates and g + b > 0 and overlap:
            blended = (to_decimal(g) * rates.get("guaranteed", 0) + to_decimal(b) * rates.get("borrowed", 0)) / (
                to_decimal(g) + to_decimal(b))
            out.endpoint_cost[ep] = out.endpoint_cost.get(ep, Decimal(0)) + to_decimal(fr * overlap / 3_600_000) * blended


def _endpoint_lines(endpoints: list[tuple[str, str, dict[str, Fraction]]], version: str, span: tuple[int, int],
                    out: Priced) -> None:
    for ep, owner, units in endpoints:
        total = round_cents(out.endpoint_cost.get(ep, Decimal(0)))
        out.endpoint_cost[ep] = total
        parts = out.endpoint_parts[ep] = cents(total, units)
        whole = sum(units.values())
        recovered, recovered_share = Decimal(0), Decimal(0)
        for tenant, part in sorted(parts.items()):
            if tenant == owner or not part:
                continue
            share = _decimal(units[tenant] / whole)
            recovered, recovered_share = recovered + part, recovered_share + share
            out.lines.append(Line("tenant", tenant, "service_share", ep, "share", share, total, part, part, version,
                                  *span, f"share of endpoint {ep} by weighted tokens"))
        if recovered:
            out.lines.append(Line("tenant", owner, "service_share", ep, "share", -recovered_share, total, -recovered,
                                  -recovered, version, *span, f"recovered from the consumers of endpoint {ep}"))


def _decimal(x: Fraction) -> Decimal:
    """A share shown to six places (the money is split exactly elsewhere)."""
    return round(Decimal(x.numerator) / Decimal(x.denominator), 6)


def rounded(lines: list[Line]) -> list[Line]:
    """Lines in whole cents that add up to the exact total rounded half up (largest remainder)."""
    amounts = signed_cents([ln.amount for ln in lines])
    lists = signed_cents([ln.list_amount for ln in lines])
    return [replace(ln, amount=a, list_amount=la) for ln, a, la in zip(lines, amounts, lists)]
