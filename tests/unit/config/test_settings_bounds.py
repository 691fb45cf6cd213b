"""Settings that readers rely on are bounded where they are read."""

import pytest
from pydantic import ValidationError

from gpuledger.config.settings import load_settings
from gpuledger.domain.cadence import MAX_STALE_CEILING_MS


def test_the_stale_ceiling_is_at_most_what_coverage_reads_allow():
    assert load_settings(stale_ceiling_s=MAX_STALE_CEILING_MS / 1000).stale_ceiling_s == 7200
    with pytest.raises(ValidationError, match="stale_ceiling_s"):
        load_settings(stale_ceiling_s=MAX_STALE_CEILING_MS / 1000 + 1)
