"""The native parse floor (bench/parse_floor.c) reads the series the engine's parser reads:
every one of a generated fleet's scrapes, with each build of steps."""

import pytest

from gpuledger.bench.parse_floor import STEPS, native, scrapes
from gpuledger.domain.dcgm import parse_exposition


@pytest.mark.parametrize("step", list(STEPS))
def test_the_native_scan_reads_every_series_the_parser_reads(step, tmp_path):
    texts = scrapes(16, 0.05, 10.0)
    assert texts
    series = [p.series_parsed + sum(p.skipped.values()) for p in map(parse_exposition, texts)]
    us, per_scrape = native(texts, STEPS[step], 1, tmp_path)
    assert per_scrape == pytest.approx(sum(series) / len(texts), abs=1e-3)
    assert us > 0
