"""Guaranteed vs borrowed: per instant, up to the quota is guaranteed, the rest borrowed."""

import pytest

from gpuledger.domain.quota import QuotaError, parse_quotas, split_by_quota
from gpuledger.domain.timeutil import parse_rfc3339_ms

H = 3_600_000


def _quotas(gpus: float, valid_from="1970-01-01T00:00:00Z", valid_to=None):
    return parse_quotas([{"tenant_id": "alpha", "gpu_class": "H100", "guaranteed_gpus": gpus,
                          "valid_from": valid_from, "valid_to": valid_to}])


def test_split_at_every_instant():
    held = [("alpha", "H100", 0, 1 * H, 2.0), ("alpha", "H100", H // 2, 2 * H, 1.0)]  # 2, then 3, then 1 GPU
    (g, b), = split_by_quota(held, _quotas(1), 0, 3 * H).values()
    assert g == pytest.approx(2.0) and b == pytest.approx(0.5 * 1 + 0.5 * 2)


def test_quota_change_and_window_clip():
    held = [("alpha", "H100", 0, 4 * H, 2.0)]
    quotas = _quotas(2, valid_to="1970-01-01T02:00:00Z") + _quotas(0.5, "1970-01-01T02:00:00Z")
    (g, b), = split_by_quota(held, quotas, H, 4 * H).values()
    assert g == pytest.approx(1 * 2 + 2 * 0.5) and b == pytest.approx(2 * 1.5)


def test_no_quota_means_all_borrowed_and_fractions_do_not_leave_noise():
    held = [("beta", "H100", 0, H, 3 / 7), ("beta", "H100", 0, H, 4 / 7)]
    (g, b), = split_by_quota(held, [], 0, H).values()
    assert (g, b) == (0.0, pytest.approx(1.0, abs=1e-12))


def test_bad_quota_names_the_entry():
    with pytest.raises(QuotaError, match=r"quotas\[0\]"):
        parse_quotas([{"tenant_id": "a"}])


@pytest.mark.parametrize("guaranteed", ["NaN", "inf", -1, "lots"])
def test_a_quota_that_is_not_a_finite_non_negative_number_is_refused(guaranteed):
    with pytest.raises(QuotaError, match=r"quotas\[0\]"):
        parse_quotas([{"tenant_id": "t", "gpu_class": "H100", "guaranteed_gpus": guaranteed,
                       "valid_from": "2026-10-01T00:00:00Z"}])


def test_borrowing_beyond_the_limit_is_integrated_and_the_peak_kept():
    from gpuledger.domain.quota import borrowing_over_limits

    t0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")
    h = 3_600_000
    quotas = parse_quotas([
        {"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, "borrow_limit_gpus": 1,
         "valid_from": "2026-10-01T00:00:00Z", "valid_to": "2026-10-01T01:00:00Z"},
        {"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, "borrow_limit_gpus": 2,
         "valid_from": "2026-10-01T01:00:00Z"},
        {"tenant_id": "b", "gpu_class": "H100", "guaranteed_gpus": 0, "valid_from": "2026-10-01T00:00:00Z"}])
    held = [("a", "H100", "H100", t0, t0 + 2 * h, 3.0), ("a", "H100", "H100/3g.40gb", t0 + 2 * h, t0 + 5 * h, 0.5),
            ("b", "H100", "H100", t0, t0 + 5 * h, 4.0)]
    # a borrows 2 GPUs 0..2 h: 1 over its limit of 1 in the first hour, none over the limit of 2 after
    assert borrowing_over_limits(held, quotas, t0, t0 + 24 * h) == {
        ("a", "H100"): {"borrow_limit_gpus": 2.0, "peak_borrowed_gpus": 2.0, "gpu_hours_over_limit": 1.0}}
    with pytest.raises(QuotaError, match="borrow_limit_gpus"):
        parse_quotas([{"tenant_id": "a", "gpu_class": "H100", "guaranteed_gpus": 1, "borrow_limit_gpus": -1,
                       "valid_from": "2026-10-01T00:00:00Z"}])
