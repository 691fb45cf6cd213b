"""Shared model endpoints: the endpoint's allocation stays with its owner and is shared out
to the tenants that used it, by weighted productive units
(successful requests' input_tokens x w_in + output_tokens x w_out, weights from the rate
card, default 1 and 1). Shares are whole micro-units of the shared quantity, split by the
largest-remainder method, so they always sum to the endpoint's total exactly."""

from __future__ import annotations

from fractions import Fraction

__all__ = ["MICRO", "endpoint_weights", "largest_remainder", "weighted_units"]

MICRO = 1_000_000


def endpoint_weights(ratecards: list[dict], at_ms: int, parse_ms) -> tuple[str | None, Fraction, Fraction]:
    """(rate-card version, w_in, w_out) of the card valid at ``at_ms``; 1 and 1 without one."""
    for card in sorted(ratecards, key=lambda c: parse_ms(c["valid_from"]), reverse=True):
        starts = parse_ms(card["valid_from"])
        ends = parse_ms(card["valid_to"]) if card.get("valid_to") else None
        if starts <= at_ms and (ends is None or at_ms < ends):
            w = card.get("endpoint_share_weights") or {}
            return (card.get("version"), Fraction(str(w.get("input_tokens", 1))),
                    Fraction(str(w.get("output_tokens", 1))))
    return None, Fraction(1), Fraction(1)


def weighted_units(input_tokens: int, output_tokens: int, w_in: Fraction, w_out: Fraction) -> Fraction:
    return input_tokens * w_in + output_tokens * w_out


def largest_remainder(total: int, weights: dict[str, Fraction]) -> dict[str, int]:
    """Split ``total`` whole units in proportion to ``weights``; the parts sum to ``total``."""
    positive = {k: w for k, w in weights.items() if w > 0}
    whole = sum(positive.values())
    if not positive or total == 0:
        return dict.fromkeys(weights, 0)
    exact = {k: total * w / whole for k, w in positive.items()}
    parts = {k: int(v) for k, v in exact.items()}  # floor: all values are non-negative
    left = total - sum(parts.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - parts[k]), k))[:left]:
        parts[k] += 1
    return {k: parts.get(k, 0) for k in weights}
