"""Suspense: allocated GPU-hours whose evidence is too weak to bill, and the decisions that
settle them (pure).

The billing policy names the confidence classes that bill tenants (default ``high`` and
``medium``). A tenant's hours of any other class (``modeled``: time-slice shares) are priced
at the list rate like the rest, but as ``suspense`` lines: shown to the tenant as under
review, paid by no one yet. Unattributed capacity (allocated, but the evidence names no
tenant: a namespace without the tenant label, a pod or namespace unknown at the time, a VM
without an owner) is suspense too, by default: one line per SKU and holder (``namespace/NAME``
or ``vm/NAME``), whose tenant nobody knows yet; the policy may send it to central instead
(``unattributed = "central"``, as before suspense existed). Capacity nobody held
(unallocated, fragmentation, unavailable) is central's, never suspense. So the
reconciliation reads: recoverable cost = tenant charges + central charges + subsidies +
suspense - credits.

A decision moves the under-review hours of a period, a tenant's or a holder's (one SKU, or
all of them), to a tenant or to central, with who decided and why; a later decision for the
same hours replaces it, and ``to = "suspense"`` puts them back under review (release).
Decisions are one append-only reference document (kind ``suspense``): ``gpuledger suspense
assign|release`` appends one and publishes the whole list, so the history of decisions is
the topic's history; a list that drops or changes a recorded decision is refused
(``rewritten``). Settled hours become ``suspense_assigned`` lines at the same list amount, so
both reconciliation identities still hold exactly; for a closed period they arrive as
correction lines in the next close (domain/ledger.py ``corrections``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpuledger.domain.pricing import TELEMETRY_UNKNOWN, UNATTRIBUTED_TO_CENTRAL, Line
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms

__all__ = ["Assignment", "BILL_CONFIDENCE", "CONFIDENCES", "UNATTRIBUTED_POLICIES", "UNKNOWN_POLICIES",
           "billing_classes", "check_bill_confidence", "decision_for", "in_force", "parse_assignments", "period_of",
           "rewritten", "settle"]

# Of a tenant's allocated hours. Unattributed capacity has no tenant to bill: the policy says
# whether it waits in suspense (the default) or goes to central (``UNATTRIBUTED_POLICIES``).
CONFIDENCES = ("high", "medium", "modeled")
# the default policy: hours without telemetry bill; unattributed capacity is suspense
BILL_CONFIDENCE = ("high", "medium", TELEMETRY_UNKNOWN)
UNKNOWN_POLICIES = ("bill", "suspense")
UNATTRIBUTED_POLICIES = ("suspense", "central")
RELEASE = "suspense"
CENTRAL = "central"


@dataclass(frozen=True)
class Assignment:
    assignment_id: str
    period: str  # YYYY-MM
    tenant_id: str  # whose under-review hours ("" for unattributed hours: ``holder`` says whose)
    sku_id: str | None  # None: every SKU of the tenant (or holder) in the period
    to: str  # a tenant id, "central", or "suspense" (released back to review)
    reason: str
    by: str
    at_ms: int
    holder: str = ""  # unattributed hours: the namespace or VM that held them ("namespace/x", "vm/y")


def check_bill_confidence(classes: Iterable[str]) -> tuple[str, ...]:
    unknown = sorted(set(classes) - set(CONFIDENCES))
    if unknown:
        raise ValueError(f"unknown confidence class(es) {', '.join(unknown)}: bill from {', '.join(CONFIDENCES)}")
    return tuple(c for c in CONFIDENCES if c in set(classes))


def billing_classes(classes: Iterable[str], telemetry_unknown: str, unattributed: str = "suspense") -> tuple[str, ...]:
    """A billing policy from its settings: the confidence classes that bill, plus
    ``TELEMETRY_UNKNOWN`` when allocated hours without telemetry bill (``bill``) rather than
    go to suspense (``suspense``), plus ``UNATTRIBUTED_TO_CENTRAL`` when unattributed capacity
    is charged to central (``central``) rather than held in suspense (``suspense``)."""
    if telemetry_unknown not in UNKNOWN_POLICIES:
        raise ValueError(f"telemetry_unknown policy {telemetry_unknown!r}: use one of {', '.join(UNKNOWN_POLICIES)}")
    if unattributed not in UNATTRIBUTED_POLICIES:
        raise ValueError(f"unattributed policy {unattributed!r}: use one of {', '.join(UNATTRIBUTED_POLICIES)}")
    return (check_bill_confidence(classes) + ((TELEMETRY_UNKNOWN,) if telemetry_unknown == "bill" else ())
            + ((UNATTRIBUTED_TO_CENTRAL,) if unattributed == "central" else ()))


def period_of(ms: int) -> str:
    return format_rfc3339(ms)[:7]


def parse_assignments(doc: list) -> list[Assignment]:
    if not isinstance(doc, list):
        raise ValueError("suspense decisions must be a JSON list")
    out, seen = [], set()
    for i, a in enumerate(doc):
        try:
            period = str(a["period"])
            parse_rfc3339_ms(f"{period}-01T00:00:00Z")
            item = Assignment(str(a["assignment_id"]), period, str(a.get("tenant_id") or ""),
                              None if a.get("sku_id") in (None, "", "*") else str(a["sku_id"]), str(a["to"]),
                              str(a["reason"]).strip(), str(a["by"]).strip(), parse_rfc3339_ms(str(a["at"])),
                              str(a.get("holder") or ""))
            if not item.assignment_id or not item.to:
                raise ValueError("assignment_id and to must not be empty")
            if bool(item.tenant_id) == bool(item.holder):
                raise ValueError("name exactly one of tenant_id (a tenant's hours) and holder (unattributed hours)")
            if not item.reason or not item.by:
                raise ValueError("a decision needs a reason and who made it (by)")
            if item.assignment_id in seen:
                raise ValueError(f"assignment_id {item.assignment_id!r} appears twice")
            seen.add(item.assignment_id)
            out.append(item)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"suspense[{i}]: {exc}; needs assignment_id, period (YYYY-MM), tenant_id (or holder, for "
                             "unattributed hours), to (a tenant, central or suspense), reason, by and at (RFC 3339); "
                             "sku_id optional") from exc
    return out


def rewritten(recorded: Iterable[Assignment], proposed: Iterable[Assignment]) -> list[str]:
    """The ids of ``recorded`` decisions that ``proposed`` drops or changes (in order): a
    decision list may only grow, since every decision is part of the record."""
    now = {a.assignment_id: a for a in proposed}
    return [a.assignment_id for a in recorded if now.get(a.assignment_id) != a]


Key = tuple[str, str, str, str | None]  # (period, tenant or "", holder or "", SKU or None)


def in_force(assignments: Iterable[Assignment]) -> dict[Key, Assignment]:
    """The decision in force per (period, tenant, holder, SKU or None): the latest (by ``at``,
    then by place in the list); a release leaves the hours under review."""
    latest: dict[Key, Assignment] = {}
    for a in sorted(enumerate(assignments), key=lambda ia: (ia[1].at_ms, ia[0])):
        latest[(a[1].period, a[1].tenant_id, a[1].holder, a[1].sku_id)] = a[1]
    return {k: a for k, a in latest.items() if a.to != RELEASE}


def decision_for(force: dict[Key, Assignment], period: str, tenant_id: str, holder: str,
                 sku_id: str) -> Assignment | None:
    """The decision in force on one SKU's under-review hours: the SKU's own, else the one for
    every SKU of the tenant (or holder)."""
    return force.get((period, tenant_id, holder, sku_id)) or force.get((period, tenant_id, holder, None))


def settle(lines: list[Line], assignments: Iterable[Assignment]) -> list[Line]:
    """Suspense lines a decision in force settles, moved to their payer; the rest unchanged.
    A decision for one SKU wins over one for every SKU of the tenant (or holder)."""
    force = in_force(assignments)
    if not force:
        return lines
    out = []
    for ln in lines:
        a = decision_for(force, period_of(ln.from_ms), ln.tenant_id, ln.holder, ln.sku_id) \
            if ln.payer == "suspense" else None
        if a is None:
            out.append(ln)
            continue
        payer, tenant = ("central", ln.tenant_id) if a.to == CENTRAL else ("tenant", a.to)
        whose = (f" held by {ln.holder} with no tenant" if ln.holder else
                 "" if a.to == ln.tenant_id else f" of {ln.tenant_id}")
        out.append(replace(ln, payer=payer, tenant_id=tenant, component="suspense_assigned",
                           description=f"under-review {ln.sku_id} GPU-hours{whose} assigned to {a.to} by {a.by}: "
                                       f"{a.reason} ({a.assignment_id})"))
    return out
