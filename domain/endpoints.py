"""Shared model endpoints: the endpoint's allocation stays with its owner and is shared out
to the tenants that used it, by weighted productive units
(successful requests' input_tokens x w_in + output_tokens x w_out, weights from the rate
card, default 1 and 1). Shares are whole micro-units of the shared quantity, split by the
largest-remainder method, so they always sum to the endpoint's total exactly.

Which capacity is an endpoint's is declared by the platform, not by the pods: the
``gpuledger.io/endpoint`` label is something any tenant can set on its own pods, so it moves
cost only where the endpoints document (``endpoints.json``: endpoint id, owning tenant,
namespaces allowed to serve it, validity) says so. Capacity labelled for an endpoint that is
not declared, held by another tenant than its owner, or in a namespace not allowed to serve
it stays with the tenant that holds it, and is reported with the reason
(``declared_endpoints``)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from gpuledger.domain.timeutil import parse_rfc3339_ms

__all__ = ["EndpointDeclaration", "EndpointsError", "MICRO", "declared_endpoints", "endpoint_refusal",
           "endpoint_weights", "largest_remainder", "parse_endpoints", "weighted_units"]

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


class EndpointsError(ValueError):
    """The endpoints document does not have the documented shape."""


@dataclass(frozen=True)
class EndpointDeclaration:
    endpoint_id: str
    owner_tenant_id: str
    namespaces: frozenset[str]
    valid_from_ms: int
    valid_to_ms: int | None
    service_tier: str = ""  # the rate card's service_tiers price its tokens ("": the card's default rates)

    def in_force(self, t_ms: int) -> bool:
        return self.valid_from_ms <= t_ms and (self.valid_to_ms is None or t_ms < self.valid_to_ms)


def parse_endpoints(doc: list) -> list[EndpointDeclaration]:
    """``[{"endpoint_id", "owner_tenant_id", "namespaces": [...], "valid_from", "valid_to",
    "service_tier"}]`` (``service_tier`` optional)."""
    if not isinstance(doc, list):
        raise EndpointsError("endpoints must be a JSON list")
    out = []
    for i, e in enumerate(doc):
        try:
            namespaces = e["namespaces"]
            if not isinstance(namespaces, list) or not namespaces or not all(isinstance(n, str) and n for n in namespaces):
                raise ValueError("namespaces must be a non-empty list of namespace names")
            if not all(isinstance(e[k], str) and e[k] for k in ("endpoint_id", "owner_tenant_id")):
                raise ValueError("endpoint_id and owner_tenant_id must be non-empty strings")
            tier = e.get("service_tier") or ""
            if not isinstance(tier, str) or "/" in tier:
                raise ValueError(f"service_tier must be a name without '/', got {tier!r}")
            out.append(EndpointDeclaration(e["endpoint_id"], e["owner_tenant_id"], frozenset(namespaces),
                                           parse_rfc3339_ms(e["valid_from"]),
                                           parse_rfc3339_ms(e["valid_to"]) if e.get("valid_to") else None, tier))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EndpointsError(f"endpoints[{i}]: {exc!r}; needs endpoint_id, owner_tenant_id, namespaces, "
                                 "valid_from") from exc
    return out


def endpoint_refusal(declared: dict[str, EndpointDeclaration], endpoint_id: str, tenant_id: str,
                     namespace: str) -> str | None:
    """Why capacity labelled ``endpoint_id`` in ``namespace`` of ``tenant_id`` is not that
    endpoint's (None: it is)."""
    d = declared.get(endpoint_id)
    if d is None:
        return f"endpoint {endpoint_id!r} is not declared in the endpoints document"
    if tenant_id != d.owner_tenant_id:
        return f"endpoint {endpoint_id!r} is owned by {d.owner_tenant_id!r}, not by {tenant_id!r}"
    if namespace not in d.namespaces:
        return f"namespace {namespace!r} may not serve endpoint {endpoint_id!r}"
    return None


def declared_endpoints(declarations: list[EndpointDeclaration], at_ms: int, capacity: list[tuple],
                       intervals: list[tuple]) -> tuple[list[tuple], list[tuple], list[dict]]:
    """Keep the endpoint capacity the declarations in force at ``at_ms`` allow.

    ``capacity``: (endpoint, tenant, namespace, GPU-hours); ``intervals``: (endpoint, tenant,
    class, from_ms, to_ms, fraction, namespace). Returns (capacity as (endpoint, owner,
    GPU-hours) summed over the allowed namespaces, intervals without the namespace, refusals:
    {endpoint_id, tenant_id, namespace, allocated_gpu_hours, reason} each)."""
    declared = {}
    for d in sorted(declarations, key=lambda d: d.valid_from_ms):
        if d.in_force(at_ms):
            declared[d.endpoint_id] = d
    kept: dict[tuple[str, str], float] = {}
    refusals = []
    for ep, tenant, namespace, hours in capacity:
        reason = endpoint_refusal(declared, ep, tenant, namespace)
        if reason is None:
            kept[(ep, tenant)] = kept.get((ep, tenant), 0.0) + hours
        else:
            refusals.append({"endpoint_id": ep, "tenant_id": tenant, "namespace": namespace,
                             "allocated_gpu_hours": hours, "reason": reason})
    kept_intervals = [tuple(r[:6]) for r in intervals if endpoint_refusal(declared, r[0], r[1], r[6]) is None]
    return [(ep, t, h) for (ep, t), h in sorted(kept.items())], kept_intervals, refusals
