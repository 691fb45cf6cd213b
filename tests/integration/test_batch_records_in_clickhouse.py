"""docs/clickhouse.md's Kafka-engine reading of batch records, on the engine: the batch schema's
``facts`` array read by ClickHouse's Avro input as the documented ``Array(Tuple(...))`` and
``ARRAY JOIN``-ed into one row per fact, with every value the fact has, from the bytes the
worker's writer makes (streams/fact_batches.py). ClickHouse's Kafka engine itself needs a
server; its Avro reader is the same code, run here embedded (chdb) on an object container file
of the same body."""

import io
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import fastavro

from gpuledger.domain.facts import FactBatch
from gpuledger.schemas.registry import latest_version, load_schema
from gpuledger.streams.avro_writer import varint
from gpuledger.streams.fact_batches import batch_schema_name, emit_batched
from gpuledger.streams.fact_codec import FACT_KINDS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "streams"))
from avro_cases import random_fact  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "clickhouse.md"


def _documented_tuple() -> str:
    """The column list inside ``facts Array(Tuple(...))`` of the doc's utilization Kafka table."""
    m = re.search(r"CREATE TABLE gpuledger\.utilization_facts_kafka\s*\(\s*facts Array\(Tuple\((.*?)\)\)\s*\)\s*ENGINE",
                  DOCS.read_text(), re.S)
    assert m, "docs/clickhouse.md: no utilization_facts_kafka table with facts Array(Tuple(...))"
    return " ".join(m.group(1).split())


def test_the_documented_array_of_tuples_reads_every_fact_of_a_batch(tmp_path):
    rng = random.Random(17)
    facts = [random_fact("utilization", rng) for _ in range(40)]
    sent = []
    emit_batched(FactBatch(utilization=facts), dict.fromkeys(FACT_KINDS, "t"),
                 lambda topic, value, key, headers=None: sent.append(value), lambda: None)
    ((value,),) = [sent]
    name = batch_schema_name("utilization")
    buf = io.BytesIO()
    fastavro.writer(buf, load_schema(name, latest_version(name)), [], codec="null")  # the header: schema, sync
    header, body = buf.getvalue(), value[5:]  # the Confluent framing off: the batch's Avro body
    (tmp_path / "b.avro").write_bytes(header + varint(1) + varint(len(body)) + body + header[-16:])
    structure = f"facts Array(Tuple({_documented_tuple()}))"
    query = (f"SELECT f.fact_id, f.observed_at_ms, f.sm_active_ratio, f.tenant_id, f.src_offset "
             f"FROM file('{tmp_path / 'b.avro'}', 'Avro', '{structure}') ARRAY JOIN facts AS f FORMAT JSONCompactEachRow")
    done = subprocess.run([sys.executable, "-c", "import chdb, sys; print(chdb.query(sys.argv[1]))", query],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    want = [[f.fact_id, f.observed_at_ms, f.sm_active_ratio, f.tenant_id, f.src_offset] for f in facts]
    assert len(rows) == len(facts) == 40
    for got, exp in zip(rows, want):  # JSON gives 64-bit integers as strings; src_offset is UInt64 there
        assert [got[0], int(got[1]), got[2], got[3], int(got[4])] == [*exp[:4], exp[4] % 2 ** 64]
