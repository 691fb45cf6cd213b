"""Guaranteed vs borrowed: per instant, up to the quota is guaranteed, the rest borrowed."""

import pytest

from gpuledger.domain.quota import QuotaError, parse_quotas, split_by_quota

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
