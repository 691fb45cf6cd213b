"""Reclaimed capacity: the GPU-hours of pods the cluster preempted or evicted, split into
guaranteed and borrowed by the tenant's quota sweep over everything it held — checked against
hand-computed truth."""

from fractions import Fraction

import pytest

from gpuledger.domain.preemption import reclaimed_by_tenant, reclaimed_gpu_hours
from gpuledger.domain.quota import parse_quotas

H = 3_600_000
T0 = 1_790_812_800_000  # 2026-10-01
QUOTAS = parse_quotas([{"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1,
                        "valid_from": "2026-10-01T00:00:00Z"}])
# a: p1 holds 1 GPU 0..10 h (ran to completion); p2 holds 2 GPUs 2..6 h and was preempted.
# 2..6 h a holds 3 GPUs against a quota of 1: a third of each is guaranteed, so p2 had
# 2/3 GPU guaranteed and 4/3 borrowed for 4 h = 8/3 h guaranteed, 16/3 h borrowed.
# b (no quota): p3 holds 1 GPU 1..4 h and was evicted: 3 borrowed hours.
HELD = [("a", "H100", "H100", T0, T0 + 10 * H, 1.0, "high", "p1"),
        ("a", "H100", "H100", T0 + 2 * H, T0 + 6 * H, 2.0, "high", "p2"),
        ("b", "H100", "H100/3g.40gb", T0 + H, T0 + 4 * H, 1.0, "high", "p3")]
DISRUPTED = {"p2": "preempted", "p3": "evicted"}


def test_reclaimed_hours_match_the_quota_sweep_by_hand():
    got = reclaimed_gpu_hours(HELD, DISRUPTED, QUOTAS, T0, T0 + 24 * H)
    assert set(got) == {("a", "H100"), ("b", "H100")}
    a = got[("a", "H100")]["preempted"]
    assert a["pods"] == 1 and a["gpu_hours"] == pytest.approx(8.0)
    assert Fraction(a["guaranteed_gpu_hours"]).limit_denominator(1000) == Fraction(8, 3)
    assert Fraction(a["borrowed_gpu_hours"]).limit_denominator(1000) == Fraction(16, 3)
    assert got[("b", "H100")] == {"evicted": {"gpu_hours": 3.0, "guaranteed_gpu_hours": 0.0,
                                              "borrowed_gpu_hours": 3.0, "pods": 1}}


def test_only_the_window_counts_and_nothing_is_reclaimed_without_disruptions():
    got = reclaimed_gpu_hours(HELD, DISRUPTED, QUOTAS, T0 + 5 * H, T0 + 24 * H)
    a = got[("a", "H100")]["preempted"]  # 5..6 h: 2 of 3 GPUs held, a third guaranteed
    assert a["gpu_hours"] == pytest.approx(2.0) and a["borrowed_gpu_hours"] == pytest.approx(4 / 3)
    assert ("b", "H100") not in got  # p3 ended at 4 h
    assert reclaimed_gpu_hours(HELD, {}, QUOTAS, T0, T0 + 24 * H) == {}


def test_the_showback_block_per_tenant():
    rows = {"held": HELD, "disrupted_pods": list(DISRUPTED.items()), "from_ms": T0, "as_of_ms": T0 + 24 * H,
            "quotas": ['[{"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, '
                       '"valid_from": "2026-10-01T00:00:00Z"}]']}
    blocks = reclaimed_by_tenant(rows)
    assert blocks["a"]["preempted_borrowed_gpu_hours"] == pytest.approx(16 / 3)
    assert (blocks["a"]["pods_preempted"], blocks["a"]["pods_evicted"]) == (1, 0)
    assert blocks["b"]["evicted_borrowed_gpu_hours"] == 3.0 and blocks["b"]["preempted_gpu_hours"] == 0.0
