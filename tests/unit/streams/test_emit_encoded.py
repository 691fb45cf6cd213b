"""``emit_encoded`` (the C writer's ``write_each`` for runs of facts, the Python path for the
rest) hands a producer what ``iter_encoded`` gives, fact for fact, in order, with the same
bytes; it waits out a full queue; and a fact that cannot be encoded goes to ``on_error`` or
raises, as in ``iter_encoded``."""

import dataclasses
import math
import random

import pytest

from avro_cases import Queue, random_batch, random_fact
from gpuledger.domain.facts import FactBatch
from gpuledger.streams import _avro_c
from gpuledger.streams.fact_codec import _CODECS, FACT_KINDS, FactCodecError, emit_encoded, iter_encoded

TOPICS = {kind: f"facts.{kind}" for kind in FACT_KINDS}


@pytest.mark.parametrize("full_every", [0, 1, 7])
def test_what_the_producer_gets_is_what_iter_encoded_gives(full_every):
    rng = random.Random(4242 + full_every)
    total = hostile_seen = 0
    for _ in range(60):
        batch = random_batch(rng, hostile=rng.choice((0.0, 0.05, 0.3)))
        want_errors, got_errors = [], []
        want = [(TOPICS[k], v, key) for k, key, v in
                iter_encoded(batch, lambda kind, f, exc: want_errors.append((kind, id(f), str(exc))))]
        queue = Queue(full_every)
        emitted = emit_encoded(batch, TOPICS, queue.produce, queue.on_full,
                               lambda kind, f, exc: got_errors.append((kind, id(f), str(exc))))
        assert queue.sent == want
        assert emitted == len(want)
        assert got_errors == want_errors
        assert queue.waits == (queue.calls - len(want))  # every refusal waited out, none lost
        total += len(want)
        hostile_seen += len(want_errors)
    assert total > 2000 and hostile_seen > 30


def test_without_on_error_an_unencodable_fact_raises_after_the_ones_before_it_went_out():
    rng = random.Random(7)
    good = [random_fact("utilization", rng) for _ in range(5)]
    bad = dataclasses.replace(good[0], sm_active_ratio=math.inf)
    batch = FactBatch(utilization=[*good[:3], bad, *good[3:]])
    queue = Queue()
    with pytest.raises(FactCodecError, match="sm_active_ratio"):
        emit_encoded(batch, TOPICS, queue.produce, queue.on_full)
    assert [key for _t, _v, key in queue.sent] == [f.fact_id.encode() for f in good[:3]]


def test_the_c_writer_takes_the_facts_it_can_and_stops_at_the_first_it_cannot():
    rng = random.Random(9)
    codec = _CODECS["capacity"]
    facts = [random_fact("capacity", rng) for _ in range(6)]
    facts[4] = dataclasses.replace(facts[4], fact_id=7)  # no str fact id: the Python path says what is wrong
    queue = Queue()
    assert codec.c_each(facts, 1, queue.produce, "t", queue.on_full) == 4
    assert [key for _t, _v, key in queue.sent] == [f.fact_id.encode() for f in facts[1:4]]
    assert codec.c_each(facts, 5, queue.produce, "t", queue.on_full) == 6
    assert codec.c_each([], 0, queue.produce, "t", queue.on_full) == 0


def test_an_error_of_the_producer_is_raised_after_the_facts_before_it_went_out():
    rng = random.Random(11)
    facts = [random_fact("health", rng) for _ in range(4)]
    sent = []

    def produce(topic, value, key):
        if len(sent) == 2:
            raise RuntimeError("broker gone")
        sent.append(key)
    with pytest.raises(RuntimeError, match="broker gone"):
        _CODECS["health"].c_each(facts, 0, produce, "t", lambda: None)
    assert sent == [f.fact_id.encode() for f in facts[:2]]
    with pytest.raises(TypeError):
        _avro_c.write_each(b"", b"", (), object, "not a list", 0, produce, "t", lambda: None)
