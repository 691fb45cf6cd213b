"""The ledger-read benchmark generates a fleet's facts in the engine and builds the period's
document from them, in a process of its own, with the hours the generated fleet holds."""

import json

import pytest

from gpuledger.bench.ledger_read import main


def test_the_ledger_read_bench_prices_exactly_the_generated_fleet(tmp_path, capsys):
    assert main(["--gpus", "16", "--hours", "1", "--cadence-s", "15", "--store", str(tmp_path / "s")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["capacity_facts"] == 16 * 60 and out["device_samples"] == 16 * 240
    held = [g for g in range(16) if g % 10 != 9]  # one GPU in ten is free
    assert out["allocated_gpu_hours"] == pytest.approx(len(held), abs=1e-6)
    active = sum((k * 31 + g) % 100 / 100 * 15 for g in held for k in range(240)) / 3600
    assert out["active_gpu_hours"] == pytest.approx(active, abs=1e-5)
    assert out["hash"].startswith("sha256:") and out["peak_rss_mib"] > 0
