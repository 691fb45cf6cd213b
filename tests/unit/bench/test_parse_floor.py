"""The native floor (bench/parse_floor.c) reads the series the engine's parser reads: every one
of a generated fleet's scrapes, with each build of steps. The build that makes facts makes a
utilization and a health fact per device a scrape, and its batch records are what the fact
schemas read: the floor writes the bodies a worker writes, not fewer bytes."""

import io

import fastavro
import pytest

from gpuledger.bench.parse_floor import STEPS, native, scrapes
from gpuledger.domain.dcgm import parse_exposition
from gpuledger.schemas import load_schema

FACTS = next(step for step, flags in STEPS.items() if "-DFACTS" in flags)


@pytest.mark.parametrize("step", list(STEPS))
def test_the_native_scan_reads_every_series_the_parser_reads(step, tmp_path):
    texts = scrapes(16, 0.05, 10.0)
    assert texts
    parsed = list(map(parse_exposition, texts))
    series = [p.series_parsed + sum(p.skipped.values()) for p in parsed]
    us, per_scrape, facts = native(texts, STEPS[step], 1, tmp_path)
    assert per_scrape == pytest.approx(sum(series) / len(texts), abs=1e-3)
    assert us > 0
    devices = sum(len(p.samples) for p in parsed) / len(texts)
    assert facts == (pytest.approx(2 * devices, abs=1e-3) if step == FACTS else 0)


def test_the_floor_writes_batch_records_the_fact_schemas_read(tmp_path):
    texts = scrapes(16, 0.05, 10.0)
    native(texts, STEPS[FACTS], 1, tmp_path, dump=tmp_path / "last")
    for kind, schema in (("utilization", "utilization_fact_batch"), ("health", "gpu_health_fact_batch")):
        body = (tmp_path / f"last.{kind}").read_bytes()
        buf = io.BytesIO(body)
        facts = fastavro.schemaless_reader(buf, fastavro.parse_schema(load_schema(schema, 1)), None)["facts"]
        assert buf.tell() == len(body)  # every byte read: no field left over or missing
        assert facts and all(len(f["fact_id"]) == 32 and f["fb_used_bytes"] is not None for f in facts)
        assert len({f["fact_id"] for f in facts}) == len(facts)
        assert {f["gpu_uuid"] for f in facts} <= {line.split('UUID="')[1].split('"')[0]
                                                  for t in texts for line in t.splitlines() if 'UUID="' in line}
