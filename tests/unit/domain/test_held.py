"""Held intervals joined across chunks (domain/held.py): touching rows of one device and
holding become one; anything that differs, overlaps or leaves a gap stays apart."""

import random

import pytest

from gpuledger.domain.held import join_touching

M = 60_000


def row(a, b, tenant="t1", share=1.0, device="GPU-0", pod="p1", fraction=1.0, confidence="high"):
    return (tenant, "H100", "H100", a, b, fraction, confidence, pod, share, device)


def gpu_hours(rows):
    return sum(r[5] * (r[4] - r[3]) for r in rows) / 3_600_000


def test_touching_rows_of_one_holding_join_in_any_order():
    rows = [row(k * M, (k + 1) * M) for k in range(30)]
    random.Random(7).shuffle(rows)
    assert join_touching(rows) == [row(0, 30 * M)]


@pytest.mark.parametrize("other", [
    row(10 * M, 20 * M, tenant="t2"), row(10 * M, 20 * M, share=0.5), row(10 * M, 20 * M, device="GPU-1"),
    row(10 * M, 20 * M, pod="p2"), row(10 * M, 20 * M, fraction=0.5), row(10 * M, 20 * M, confidence="medium"),
    row(11 * M, 20 * M),  # a gap
    row(9 * M, 20 * M),  # an overlap
])
def test_rows_that_differ_or_do_not_touch_stay_apart(other):
    got = join_touching([row(0, 10 * M), other])
    assert sorted(got) == sorted([row(0, 10 * M), other])


def test_joining_keeps_every_holdings_hours_and_pods():
    rng = random.Random(11)
    rows, t = [], {}
    for _ in range(400):
        device, pod = f"GPU-{rng.randrange(4)}", f"p{rng.randrange(3)}"
        a = t.get(device, 0) + (rng.choice([0, 0, 0, M]))  # mostly touching, sometimes a gap
        b = a + rng.randrange(1, 5) * M
        t[device] = b
        rows.append(row(a, b, device=device, pod=pod, share=rng.choice([1.0, 1.0, 0.5])))
    got = join_touching(rows)
    assert len(got) < len(rows)
    assert gpu_hours(got) == pytest.approx(gpu_hours(rows), rel=1e-12)
    for r in got:  # every instant of a joined row was held by exactly one input row of its key
        parts = sorted((x for x in rows if x[:3] + x[5:] == r[:3] + r[5:] and r[3] <= x[3] < r[4]), key=lambda x: x[3])
        assert parts[0][3] == r[3] and parts[-1][4] == r[4]
        assert all(p[4] == q[3] for p, q in zip(parts, parts[1:]))
