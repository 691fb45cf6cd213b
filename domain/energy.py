"""GPU energy split for pricing (pure): who consumed each GPU class's energy in a window.

The evidence (sinks/showback_sql.py ``energy_sql``) gives, per GPU class, the energy its
physical GPUs drew (each GPU's power samples integrated over their spans: one series per GPU,
the parent of MIG instances, the one series time-slice replicas share) and, per tenant and
confidence, the part drawn while the tenant held the GPU, in proportion to the capacity it
held (a MIG instance's weight, a replica's 1/N). That part bills the tenant when its
confidence bills (else it is under review, like its GPU-hours); the rest (idle GPUs, capacity
nobody held) is central's.

Energy is split in whole micro-kilowatt-hours by largest remainder, so the parts add up to the
class's measured energy exactly; over-held capacity (shares above the GPU) shrinks every
tenant's part in proportion instead of giving central a negative part.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from gpuledger.domain.endpoints import MICRO, largest_remainder

__all__ = ["JOULES_PER_KWH", "energy_parts"]

JOULES_PER_KWH = 3_600_000


def energy_parts(rows: Iterable[tuple], bill_confidence: tuple[str, ...] | None
                 ) -> dict[str, dict[tuple[str, str], int]]:
    """``rows``: (GPU class, tenant, confidence, joules), the tenant '' giving the class's
    measured total. Returns per class {(payer, tenant): micro-kWh} with payer ``tenant``,
    ``suspense`` (held under a confidence that does not bill) or ``central`` (tenant '')."""
    totals: dict[str, Fraction] = {}
    held: dict[str, dict[tuple[str, str], Fraction]] = {}
    for gpu_class, tenant, confidence, joules in rows:
        j = Fraction(max(0.0, float(joules or 0.0)))
        if not tenant:
            totals[gpu_class] = totals.get(gpu_class, Fraction(0)) + j
            continue
        payer = "tenant" if bill_confidence is None or confidence in bill_confidence else "suspense"
        mine = held.setdefault(gpu_class, {})
        mine[(payer, tenant)] = mine.get((payer, tenant), Fraction(0)) + j
    out = {}
    for gpu_class in sorted(set(totals) | set(held)):
        total, mine = totals.get(gpu_class, Fraction(0)), dict(held.get(gpu_class, {}))
        whole = max(total, sum(mine.values(), Fraction(0)))
        mine[("central", "")] = whole - sum(mine.values(), Fraction(0))
        out[gpu_class] = largest_remainder(round(total * MICRO / JOULES_PER_KWH), mine)
    return out
