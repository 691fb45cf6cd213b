"""``gpuledger forecast`` on the embedded engine (chdb): 8 weeks of generated demand with a
known weekly pattern and trend written as facts, the reference documents (inventory, quotas,
throughput) published and processed as ingest would; the CLI's forecast of the next 2 weeks'
peak is within 10 % of the generated truth, the required service GPUs match the hand
computation, and ``--save`` fills the table the scheduler dashboard reads."""

from __future__ import annotations

import csv
import io
import json
import random

import orjson
import pytest

from gpuledger.cli.main import main
from gpuledger.domain.facts import CapacityFact, FactBatch
from gpuledger.domain.requests import RequestFact
from gpuledger.domain.timeutil import format_rfc3339, parse_rfc3339_ms
from gpuledger.producers.capture import CaptureError, load_reference
from gpuledger.sinks.clickhouse import ClickHouseStore
from pipeline import MemoryPipeline, ingest, partitioned
from forecast_demand import demand_gpus

pytestmark = pytest.mark.integration

H, D = 3_600_000, 86_400_000
START = parse_rfc3339_ms("2026-08-03T00:00:00Z")  # a Monday
WEEKS, FUTURE_WEEKS = 8, 2
AS_OF = START + WEEKS * 7 * D
CLASS, MODEL = "H100-80GB", "llama-3.1-70b-instruct"
NODES = 12  # 8 GPUs each: 96 GPUs
THROUGHPUT = [{"gpu_class": CLASS, "profile": "", "mode": "exclusive", "model": MODEL,
               "sustainable_tokens_per_s_per_gpu": 1200, "slo": {"ttft_p95_s": 2.0, "e2e_p95_s": 30.0},
               "validated_at": "2026-07-20T00:00:00Z", "validated_by": "perf-team", "failure_reserve_ratio": 0.125,
               "maintenance_reserve_ratio": 0.05, "valid_from": "2026-07-01T00:00:00Z"}]


def gpus_held() -> list[int]:
    rng = random.Random(17)
    return [round(demand_gpus(h, rng)) for h in range((WEEKS + FUTURE_WEEKS) * 7 * 24)]


def capacity_facts(held: list[int]) -> list[CapacityFact]:
    """GPU k is held in hour h when k < held[h]: one fact per run of hours; the endpoint's
    GPU (k = 0) serves the model."""
    out = []
    for k in range(NODES * 8):
        h = 0
        while h < len(held):
            if k >= held[h]:
                h += 1
                continue
            a = h
            while h < len(held) and k < held[h]:
                h += 1
            out.append(CapacityFact(f"cap-{k}-{a}", "c1", "allocated", f"GPU-{k:04d}", f"GPU-{k:04d}", f"node-{k // 8}",
                                    CLASS, "exclusive", "", 1.0, START + a * H, START + h * H, "acme", "", "", "ns",
                                    "ns-uid", f"pod-{k}-{a}", f"uid-{k}-{a}", "main", "chat" if k == 0 else "", "pod",
                                    "high", "", "t", 0, 0))
    return out


def request_facts() -> list[RequestFact]:
    """Per hour one request's worth of tokens: 9,000 tokens/s at 14:00 UTC, 3,000 otherwise."""
    out = []
    for h in range(WEEKS * 7 * 24):
        rate = 9000 if h % 24 == 14 else 3000
        out.append(RequestFact(f"req-{h}", "c1", "chat", MODEL, "", f"r{h}", "acme", "", START + h * H + 60_000,
                               START + h * H, "success", rate * 3600 // 4, rate * 3600 * 3 // 4, None, None, None,
                               "t", 0, h))
    return out


def publish_documents(tmp_path, store: ClickHouseStore) -> None:
    capture = tmp_path / "empty-capture"
    capture.mkdir()
    (capture / "manifest.json").write_bytes(orjson.dumps({"format": "gpuledger-capture/1", "cluster_id": "c1"}))
    topics, pub, _ = ingest(capture)
    inventory = {"gpus": [{"gpu_uuid": f"GPU-{k:04d}", "node": f"node-{k // 8}", "model": CLASS, "gpu_class": CLASS,
                           "valid_from": format_rfc3339(START - D)} for k in range(NODES * 8)]}
    quotas = [{"tenant_id": "acme", "gpu_class": CLASS, "guaranteed_gpus": 60, "valid_from": format_rfc3339(START)}]
    for kind, doc in (("inventory", inventory), ("quotas", quotas), ("throughput", THROUGHPUT)):
        path = tmp_path / f"{kind}.json"
        path.write_bytes(orjson.dumps(doc))
        load_reference(path, kind, "c1", pub, topics, lambda: AS_OF)
    bad = tmp_path / "bad-throughput.json"
    bad.write_bytes(orjson.dumps([{**THROUGHPUT[0], "sustainable_tokens_per_s_per_gpu": 0}]))
    with pytest.raises(CaptureError, match="above 0"):
        load_reference(bad, "throughput", "c1", pub, topics, lambda: AS_OF)
    records = partitioned(topics, pub.records)
    mp = MemoryPipeline(topics, store=store)
    mp.extents(records)
    mp.feed(records)
    assert not mp.dead


def test_forecast_cli_on_generated_facts(tmp_path, capsys):
    held = gpus_held()
    dsn = f"chdb://{tmp_path / 'clickhouse'}"
    store = ClickHouseStore(dsn)
    store.ensure_schema()
    publish_documents(tmp_path, store)
    store.write_facts(FactBatch(capacity=capacity_facts(held[:WEEKS * 168]), requests=request_facts()))
    assert store.query(f"SELECT count() FROM {store.db}.reference_documents FINAL WHERE kind = 'throughput'")[1] == [(1,)]

    argv = ["--home", str(tmp_path / "home"), "--dsn", dsn, "forecast"]
    assert main([*argv, "--format", "json", "--save"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["as_of"] == format_rfc3339(AS_OF) and doc["history"]["days"] == 56 and doc["horizon"]["days"] == 14
    series = {(e["mode"], e["model"], e["measure"]): e for e in doc["series"]}

    total = series[("all", "", "allocated_gpus")]
    true_peak = max(held[WEEKS * 168:])
    assert total["history_peak"] == max(held[:WEEKS * 168])
    assert abs(total["forecast"]["peak"] - true_peak) / true_peak < 0.10, (total["forecast"]["peak"], true_peak)
    assert len(total["forecast"]["week"]) == 2 and total["backtest"]["holdout_days"] == 14
    assert abs(total["backtest"]["peak_error_ratio"]) < 0.10
    assert [w["start"] for w in total["curves"]["week"]][:2] == ["2026-08-03T00:00:00Z", "2026-08-10T00:00:00Z"]
    assert [m["start"] for m in total["curves"]["month"]] == ["2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z"]
    assert series[("all", "", "committed_gpus")]["history_peak"] == 60

    # 9,000 tokens/s ÷ 1,200 per GPU = 7.5 GPUs; × (1 + 0.125 + 0.05) = 8.8125 -> 9
    (req,) = doc["required"]
    assert (req["gpu_class"], req["mode"], req["model"]) == (CLASS, "exclusive", MODEL)
    assert req["peak_tokens_per_s"] == pytest.approx(9000.0)
    assert req["service_gpus"] == pytest.approx(7.5) and req["required_gpus_exact"] == pytest.approx(8.8125)
    assert req["required_gpus"] == 9 and req["slo"] == {"ttft_p95_s": 2.0, "e2e_p95_s": 30.0}
    (head,) = doc["headroom"]
    assert head["physical_gpus"] == 96 and head["failure_domain_gpus"] == 8
    assert head["headroom_gpus"] == pytest.approx(96 - total["forecast"]["peak"] - 8)

    _, saved = store.query(f"""SELECT kind, count() FROM {store.db}.capacity_forecasts FINAL
                                WHERE gpu_class = '{CLASS}' GROUP BY kind ORDER BY kind""")
    assert dict(saved).keys() == {"actual", "backtest", "forecast", "plan"}
    _, (row,) = store.query(f"""SELECT peak FROM {store.db}.capacity_forecasts FINAL
                                 WHERE measure = 'required_gpus' AND kind = 'plan'""")
    assert row[0] == 9

    assert main([*argv, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {"gpu_class", "measure", "bucket", "bucket_start", "kind", "peak", "mean"} <= set(rows[0])
    fc_weeks = [r for r in rows if r["measure"] == "allocated_gpus" and r["mode"] == "all" and r["bucket"] == "week"
                and r["kind"] == "forecast"]
    assert [r["bucket_start"] for r in fc_weeks] == ["2026-09-28T00:00:00Z", "2026-10-05T00:00:00Z"]

    assert main([*argv, "--as-of", "2026-08-05T00:00:00Z"]) == 0  # 2 days of history: curves, no forecast
    out = capsys.readouterr().out
    assert "history 2 days" in out and "headroom H100-80GB" in out and "history (no forecast" in out
    store.close()
