"""The broker-clock offset: from the probe with the shortest round trip, midpoint rule."""

import pytest

from gpuledger.producers.clock import best_reading


def test_the_fastest_probe_gives_the_offset():
    # (local sent, broker append, local acked): this host runs 300 s ahead of the broker
    probes = [(1_000_300_000, 1_000_000_040, 1_000_300_090),  # 90 ms round trip
              (1_000_301_000, 1_000_001_002, 1_000_301_004),  # 4 ms: the one to trust
              (1_000_302_000, 1_000_002_030, 1_000_302_050)]
    reading = best_reading(probes)
    assert reading.round_trip_ms == 4
    assert reading.offset_ms == 1_000_001_002 - 1_000_301_002 == -300_000


def test_a_host_behind_the_broker_has_a_positive_offset():
    assert best_reading([(500, 300_502, 504)]).offset_ms == 300_000


def test_no_acknowledged_probe_is_an_error():
    with pytest.raises(ValueError, match="no clock probe"):
        best_reading([])
