"""Rate cards and money arithmetic.

Money is Decimal throughout and rounded to cents only where it is shown or where a total
must be split into parts that add up exactly, which is done in whole cents by largest
remainder. A window is cut at rate-card validity edges and at calendar-month edges (a
card's overhead is an amount per calendar month, pro rata to the part of the month a window
covers). What the rate card prices and how is in ``domain/pricing.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from gpuledger.domain.bounds import check_rate
from gpuledger.domain.endpoints import largest_remainder
from gpuledger.domain.timeutil import month_bounds_ms, parse_rfc3339_ms

__all__ = ["CENT", "RateCard", "RatecardError", "card_windows", "cents", "overhead_pool", "parse_ratecards",
           "round_cents", "signed_cents", "to_decimal"]

CENT = Decimal("0.01")


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
    # classes whose guaranteed quota is charged whether used or not ("*": every class)
    committed_classes: tuple[str, ...] = ()
    per_kwh: Decimal | None = None  # GPU energy (DCGM power over time); None: energy is not priced
    # service tier -> (input, output) per million tokens, for endpoints declared in that tier
    tier_tokens: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)

    def commits(self, gpu_class: str) -> bool:
        return "*" in self.committed_classes or gpu_class in self.committed_classes


def round_cents(amount: Decimal) -> Decimal:
    """Half up, to the cent: how money is shown."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def to_decimal(value: object) -> Decimal:
    return Decimal(str(value))


def parse_ratecards(doc: list) -> list[RateCard]:
    """ratecards.json -> cards sorted by validity; every rate and amount must be a finite
    number, 0 or more. Raises RatecardError naming the card and field."""
    if not isinstance(doc, list):
        raise RatecardError("rate cards must be a JSON list")
    out = []
    for i, c in enumerate(doc):
        if not isinstance(c, dict):
            raise RatecardError(f"ratecards[{i}] must be an object, got {c!r}")
        try:
            tokens, overhead = c.get("per_million_tokens") or {}, c.get("overhead") or {}
            gpu_hour, energy = c.get("gpu_hour") or {}, c.get("energy") or {}
            if not all(isinstance(x, dict) for x in (tokens, overhead, energy, gpu_hour, *gpu_hour.values())):
                raise ValueError("gpu_hour (and each class in it), per_million_tokens, overhead and energy must be "
                                 "objects")
            if set(energy) - {"per_kwh"}:
                raise ValueError(f"energy takes per_kwh only, got {sorted(energy)}")
            tiers = c.get("service_tiers") or {}
            if not isinstance(tiers, dict) or not all(isinstance(t, dict) and set(t) <= {"input", "output"}
                                                      for t in tiers.values()):
                raise ValueError("service_tiers must map a tier to {input, output} per-million-token rates")
            rule = str(overhead.get("rule", "proportional_to_allocation"))
            if rule != "proportional_to_allocation":
                raise ValueError(f"overhead rule {rule!r} is not known (proportional_to_allocation is)")
            _check_rates(c, gpu_hour, tokens, overhead)
            out.append(RateCard(
                str(c["version"]), parse_rfc3339_ms(c["valid_from"]),
                parse_rfc3339_ms(c["valid_to"]) if c.get("valid_to") else None, str(c.get("currency", "USD")),
                {cls: {k: to_decimal(v) for k, v in rates.items()} for cls, rates in gpu_hour.items()},
                to_decimal(tokens.get("input", 0)), to_decimal(tokens.get("output", 0)),
                to_decimal(overhead.get("amount", 0)), rule, _committed(c.get("committed_quota", False)),
                to_decimal(energy["per_kwh"]) if "per_kwh" in energy else None,
                {tier: (to_decimal(r.get("input", 0)), to_decimal(r.get("output", 0))) for tier, r in tiers.items()}))
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as exc:
            raise RatecardError(f"ratecards[{i}]: {exc!r}; needs version, valid_from and numeric rates") from exc
    return sorted(out, key=lambda c: c.valid_from_ms)


def _committed(value: object) -> tuple[str, ...]:
    """``committed_quota``: false (default), true (every class) or a list of GPU classes."""
    if value is True:
        return ("*",)
    if value is False or value is None:
        return ()
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return tuple(sorted(set(value)))
    raise ValueError(f"committed_quota must be true, false or a non-empty list of GPU classes, got {value!r}")


def _check_rates(card: dict, gpu_hour: dict, tokens: dict, overhead: dict) -> None:
    named = [(f"gpu_hour.{cls}.{k}", v) for cls, rates in gpu_hour.items() for k, v in rates.items()]
    named += [(f"per_million_tokens.{k}", tokens[k]) for k in ("input", "output") if k in tokens]
    named += [("overhead.amount", overhead["amount"])] if "amount" in overhead else []
    energy = card.get("energy") or {}
    named += [("energy.per_kwh", energy["per_kwh"])] if "per_kwh" in energy else []
    tiers = card.get("service_tiers") or {}
    named += [(f"service_tiers.{t}.{k}", v) for t, r in tiers.items() if isinstance(r, dict) for k, v in r.items()]
    weights = card.get("endpoint_share_weights") or {}
    named += [(f"endpoint_share_weights.{k}", v) for k, v in weights.items()] if isinstance(weights, dict) else []
    for name, value in named:
        reason = check_rate(value, name)
        if reason:
            raise ValueError(reason)


def card_windows(cards: list[RateCard], from_ms: int, to_ms: int) -> list[tuple[RateCard | None, int, int]]:
    """The window cut at card and month edges: (card or None where no card is valid, start, end)."""
    cuts = {from_ms, to_ms} | {t for c in cards for t in (c.valid_from_ms, c.valid_to_ms)
                               if t is not None and from_ms < t < to_ms}
    edge = month_bounds_ms(from_ms)[1]
    while edge < to_ms:
        cuts.add(edge)
        edge = month_bounds_ms(edge)[1]
    bounds = sorted(cuts)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        valid = [c for c in cards if c.valid_from_ms <= a and (c.valid_to_ms is None or a < c.valid_to_ms)]
        out.append((max(valid, key=lambda c: c.valid_from_ms) if valid else None, a, b))
    return out


def overhead_pool(card: RateCard, from_ms: int, to_ms: int) -> Decimal:
    """The card's monthly overhead for a window inside one calendar month, pro rata, in cents."""
    start, end = month_bounds_ms(from_ms)
    return round_cents(card.overhead_per_month * Decimal(to_ms - from_ms) / Decimal(end - start))


def cents(total: Decimal, weights: dict[str, Fraction]) -> dict[str, Decimal]:
    """Split a money total, rounded to cents, into cents that add up to it exactly."""
    whole = int(round_cents(total) / CENT)
    return {k: Decimal(v) * CENT for k, v in largest_remainder(whole, weights).items()}


def signed_cents(amounts: list[Decimal]) -> list[Decimal]:
    """Round signed amounts to cents so that they add up to their exact sum rounded half up:
    floor each, then give the missing cents to the largest remainders (ties by position)."""
    exact = [a / CENT for a in amounts]
    floors = [math.floor(x) for x in exact]
    target = int(round_cents(sum(amounts, Decimal(0))) / CENT)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:target - sum(floors)]:
        floors[i] += 1
    return [Decimal(f) * CENT for f in floors]
