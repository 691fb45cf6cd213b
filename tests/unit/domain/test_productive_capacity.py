"""Productive work on guaranteed vs borrowed capacity, against a hand-computed truth.

alpha owns endpoint chat (H100, quota 1 GPU). Hour 0: chat runs on 2 GPUs, so alpha holds 2
(1 guaranteed, 1 borrowed: borrowed share 1/2). Hour 1: chat runs on 1 GPU all hour and alpha
also trains on 1 GPU for 30 min: 1.5 GPU-hours held, 1 guaranteed, 0.5 borrowed (share 1/3).
beta sends 100 requests (1,000 output tokens) in hour 0 and 30 (300) in hour 1; gamma 7 (70)
to an endpoint with no capacity.
"""

import pytest

from gpuledger.domain.productive_capacity import productive_by_capacity
from gpuledger.domain.quota import parse_quotas
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")
QUOTAS = parse_quotas([{"tenant_id": "alpha", "gpu_class": "H100", "guaranteed_gpus": 1,
                        "valid_from": "2026-10-01T00:00:00Z"}])
INTERVALS = [("chat", "alpha", "H100", T0, T0 + H, 1.0), ("chat", "alpha", "H100", T0, T0 + 2 * H, 1.0)]
HELD = [("alpha", "H100", "H100", T0, T0 + H, 1.0, "high"), ("alpha", "H100", "H100", T0, T0 + 2 * H, 1.0, "high"),
        ("alpha", "H100", "H100", T0 + H + H // 2, T0 + 2 * H, 1.0, "high")]
WORK = [("beta", T0, "chat", 100, 1_000), ("beta", T0 + H, "chat", 30, 300), ("gamma", T0, "nope", 7, 70)]


def test_each_hour_s_work_splits_by_the_owner_s_borrowed_share():
    got = productive_by_capacity(WORK, INTERVALS, HELD, QUOTAS)
    assert got["beta"]["guaranteed"] == {"successful_requests": 50 + 20, "output_tokens": 500 + 200}
    assert got["beta"]["borrowed"] == {"successful_requests": 50 + 10, "output_tokens": 500 + 100}
    assert got["beta"]["unknown"] == {"successful_requests": 0.0, "output_tokens": 0.0}
    assert got["gamma"]["unknown"] == {"successful_requests": 7, "output_tokens": 70}


def test_with_a_quota_covering_everything_nothing_is_borrowed():
    roomy = parse_quotas([{"tenant_id": "alpha", "gpu_class": "H100", "guaranteed_gpus": 4,
                           "valid_from": "2026-10-01T00:00:00Z"}])
    got = productive_by_capacity(WORK[:2], INTERVALS, HELD, roomy)["beta"]
    assert got["borrowed"]["successful_requests"] == 0 and got["guaranteed"]["successful_requests"] == 130


@pytest.mark.parametrize("quotas", [[], QUOTAS])
def test_the_parts_add_up_to_the_work(quotas):
    got = productive_by_capacity(WORK, INTERVALS, HELD, quotas)
    for tenant, n in (("beta", 130), ("gamma", 7)):
        assert sum(k["successful_requests"] for k in got[tenant].values()) == pytest.approx(n)
