"""Financial consumption: the rate card applied to allocation and productive work.

Money is Decimal throughout and rounded to cents only where it is shown or where a total
must be split into parts that add up exactly (endpoint shares, overhead), which is done in
whole cents by largest remainder. A window is split at rate-card validity edges; hours
outside every card, or of a GPU class a card does not price, are reported as unpriced.

Per tenant: guaranteed and borrowed GPU-hours x the card's rates for the class;
variable = successful requests' tokens x the per-million-token rates; service share = its
cents of each shared endpoint's cost (the endpoint's GPU-hours at its owner's blended rate
for the class), split by weighted tokens; overhead = the card's monthly amount, pro rata to
the window, split in proportion to allocated GPU-hours; the endpoint owner is credited
what its consumers were charged (its total excludes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from gpuledger.domain.endpoints import largest_remainder
from gpuledger.domain.timeutil import MS_PER_HOUR, parse_rfc3339_ms

__all__ = ["CENT", "RateCard", "round_cents", "RatecardError", "card_windows", "cents", "parse_ratecards", "to_decimal"]

CENT = Decimal("0.01")
MONTH_MS = 30 * 24 * MS_PER_HOUR  # overhead amounts are per 30-day month, pro rata


class RatecardError(ValueError):
    """ratecards.json does not have the documented shape."""


@dataclass(frozen=True)
class RateCard:
    version: str
    valid_from_ms: int
    valid_to_ms: int | None
    currency: str
    gpu_hour: dict[str, dict[str, Decimal]]  # class -> {"guaranteed": rate, "borrowed": rate}
    per_million_input: Decimal
    per_million_output: Decimal
    overhead_per_month: Decimal
    overhead_rule: str


def round_cents(amount: Decimal) -> Decimal:
    """Half up, to the cent: how money is shown."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def to_decimal(value: object) -> Decimal:
    return Decimal(str(value))


def parse_ratecards(doc: list) -> list[RateCard]:
    if not isinstance(doc, list):
        raise RatecardError("rate cards must be a JSON list")
    out = []
    for i, c in enumerate(doc):
        try:
            tokens, overhead = c.get("per_million_tokens") or {}, c.get("overhead") or {}
            out.append(RateCard(
                str(c["version"]), parse_rfc3339_ms(c["valid_from"]),
                parse_rfc3339_ms(c["valid_to"]) if c.get("valid_to") else None, str(c.get("currency", "USD")),
                {cls: {k: to_decimal(v) for k, v in rates.items()} for cls, rates in (c.get("gpu_hour") or {}).items()},
                to_decimal(tokens.get("input", 0)), to_decimal(tokens.get("output", 0)),
                to_decimal(overhead.get("amount", 0)), str(overhead.get("rule", "proportional_to_allocation"))))
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            raise RatecardError(f"ratecards[{i}]: {exc!r}; needs version, valid_from and numeric rates") from exc
    return sorted(out, key=lambda c: c.valid_from_ms)


def card_windows(cards: list[RateCard], from_ms: int, to_ms: int) -> list[tuple[RateCard | None, int, int]]:
    """The window cut at card edges: (card or None where no card is valid, start, end)."""
    cuts = {from_ms, to_ms} | {t for c in cards for t in (c.valid_from_ms, c.valid_to_ms)
                               if t is not None and from_ms < t < to_ms}
    bounds = sorted(cuts)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        valid = [c for c in cards if c.valid_from_ms <= a and (c.valid_to_ms is None or a < c.valid_to_ms)]
        out.append((max(valid, key=lambda c: c.valid_from_ms) if valid else None, a, b))
    return out


def cents(total: Decimal, weights: dict[str, Fraction]) -> dict[str, Decimal]:
    """Split a money total, rounded to cents, into cents that add up to it exactly."""
    whole = int(round_cents(total) / CENT)
    return {k: Decimal(v) * CENT for k, v in largest_remainder(whole, weights).items()}


@dataclass
class TenantCost:
    guaranteed: Decimal = Decimal(0)
    borrowed: Decimal = Decimal(0)
    variable: Decimal = Decimal(0)
    service_share: Decimal = Decimal(0)
    overhead: Decimal = Decimal(0)
    credits: Decimal = Decimal(0)
    endpoint_recovered: Decimal = Decimal(0)

    @property
    def total(self) -> Decimal:
        return (self.guaranteed + self.borrowed + self.variable + self.service_share + self.overhead - self.credits
                - self.endpoint_recovered)

    def shown(self) -> dict:
        """Rounded to cents here, at presentation, and only here."""
        parts = {"guaranteed": self.guaranteed, "borrowed": self.borrowed, "variable": self.variable,
                 "service_share": self.service_share, "overhead": self.overhead, "credits": self.credits,
                 "endpoint_recovered": self.endpoint_recovered, "total": self.total}
        return {k: float(round_cents(v)) for k, v in parts.items()}


def allocation_cost(hours: dict[tuple[str, str], tuple[float, float]], card: RateCard,
                    costs: dict[str, TenantCost]) -> dict[str, float]:
    """Add guaranteed/borrowed cost; returns GPU-hours the card does not price, by class."""
    unpriced: dict[str, float] = {}
    for (tenant, gpu_class), (guaranteed_h, borrowed_h) in hours.items():
        rates = card.gpu_hour.get(gpu_class)
        if rates is None:
            unpriced[gpu_class] = unpriced.get(gpu_class, 0.0) + guaranteed_h + borrowed_h
            continue
        c = costs.setdefault(tenant, TenantCost())
        c.guaranteed += to_decimal(guaranteed_h) * rates.get("guaranteed", Decimal(0))
        c.borrowed += to_decimal(borrowed_h) * rates.get("borrowed", Decimal(0))
    return unpriced


def token_cost(input_tokens: int, output_tokens: int, card: RateCard) -> Decimal:
    million = Decimal(1_000_000)
    return input_tokens / million * card.per_million_input + output_tokens / million * card.per_million_output


def overhead_share(card: RateCard, window_ms: int, allocated_h: dict[str, float],
                   costs: dict[str, TenantCost]) -> None:
    """The card's monthly overhead, pro rata to the window, in proportion to allocation."""
    if card.overhead_per_month == 0 or not allocated_h:
        return
    amount = card.overhead_per_month * Decimal(window_ms) / Decimal(MONTH_MS)
    for tenant, part in cents(amount, {t: Fraction(to_decimal(h)) for t, h in allocated_h.items()}).items():
        costs.setdefault(tenant, TenantCost()).overhead += part
