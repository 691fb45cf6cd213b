"""A worker's engine makes the utilization facts of exclusive GPUs as their Avro bodies
(``Engine(encoded=True)``, streams/fact_batches.py ``encode_fact_bodies``): on a
generated fleet with jitter, lost scrapes and PodResources on its own cadence, every fact is
the body the writer writes of the fact the engine makes without it, in the same order (the
facts made elsewhere, samples before a node's first snapshot, stay facts among them), and the
batch records are the same."""

from gpuledger.bench.fleet_gen import fleet_plan
from gpuledger.domain.facts import FactBatch
from gpuledger.streams.fact_batches import emit_batched, encode_fact_bodies
from gpuledger.streams.fact_codec import _CODECS, FACT_KINDS, encode_fact
from pipeline import fleet_batches

HEADER = 5  # a framed single fact: 0x00 and the 4-byte schema version


def _utilization(plan, encoded: bool) -> list:
    return [f for batch in fleet_batches(plan, 89, encoded) for f in batch.utilization]


def test_the_writer_is_set_for_the_schema_in_force():
    assert encode_fact_bodies() is True


def test_a_fleet_gives_the_bodies_of_the_facts_it_gives_without_them():
    assert encode_fact_bodies()
    plan = fleet_plan(16, 2, cadence_s=15, pr_cadence_s=5, jitter=0.45, missing=0.2, seed=11)
    facts, bodies = _utilization(plan, False), _utilization(plan, True)
    assert len(facts) > 5000 and all(type(f) is not bytes for f in facts)
    made = sum(type(b) is bytes for b in bodies)
    assert made > 0.9 * len(bodies), made  # exclusive GPUs: nearly all of them bodies
    assert [b if type(b) is bytes else encode_fact("utilization", b)[HEADER:] for b in bodies] == \
        [encode_fact("utilization", f)[HEADER:] for f in facts]


def test_batch_records_of_bodies_are_those_of_the_facts():
    assert encode_fact_bodies()
    plan = fleet_plan(8, 0.5, cadence_s=10, pr_cadence_s=10, seed=3)
    facts, bodies = _utilization(plan, False), _utilization(plan, True)
    sent = {}
    for name, batch in (("facts", facts), ("bodies", bodies)):
        records = sent[name] = []
        emit_batched(FactBatch(utilization=batch), {k: f"facts.{k}" for k in FACT_KINDS},
                     lambda topic, value, key, headers=None: records.append((topic, value, key, headers)),
                     lambda: None, max_bytes=4096)
    assert len(sent["facts"]) > 10 and sent["bodies"] == sent["facts"]
    assert _CODECS["utilization"].name == "utilization_fact"
