"""Ingest on the in-memory publisher: every line that once stopped it, and every implausible
one, is a dead letter with its file, line and cause; the rest of the capture is published
exactly as if those lines had never been there."""

import shutil

import orjson
import pytest

from captures import spoil, without_documents
from gpuledger.demo.cluster import write_capture
from gpuledger.producers.capture import ingest_capture
from gpuledger.bus.port import ListPublisher
from gpuledger.schemas import Codec
from gpuledger.bus.topics import Topics
from pipeline import WALL_MS, ingest
from plans import service_plan


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    clean = write_capture(service_plan(), root / "clean")
    dirty = root / "dirty"
    shutil.copytree(clean, dirty)
    expected = spoil(dirty)
    without_documents(clean)
    return clean, dirty, expected


def test_every_bad_line_is_a_dead_letter_naming_file_line_and_cause(captures):
    _, dirty, expected = captures
    topics, pub, summary = ingest(dirty)
    dead = {d["source"]: d for d in (Codec("dead_letter").decode(r.value) for r in pub.records
                                     if r.topic == topics.dead_letter.name)}
    assert set(dead) == set(expected)
    for source, cause in expected.items():
        assert cause in dead[source]["reason"], (source, dead[source]["reason"])
        assert dead[source]["stage"] == "ingest" and dead[source]["raw"]
    assert sum(summary.rejected.values()) == len(expected) == 12


def test_the_rest_is_published_as_without_the_bad_lines(captures):
    clean, dirty, _ = captures
    topics, clean_pub, _ = ingest(clean)
    _, dirty_pub, _ = ingest(dirty)
    good = [(r.topic, r.key, r.value, r.timestamp_ms, r.partition) for r in dirty_pub.records
            if r.topic != topics.dead_letter.name]
    assert good == [(r.topic, r.key, r.value, r.timestamp_ms, r.partition) for r in clean_pub.records]
    by_topic = {t.name: sum(1 for r in good if r[0] == t.name) for t in (topics.vgpu, topics.requests, topics.dcgm)}
    assert all(n > 0 for n in by_topic.values()), by_topic


def test_the_future_bound_follows_the_setting(tmp_path):
    cap = write_capture(service_plan(), tmp_path / "cap")
    last_ms = max(orjson.loads(x)["observed_at"] for x in (cap / "requests.jsonl").read_bytes().splitlines())
    from gpuledger.domain.timeutil import parse_rfc3339_ms

    topics = Topics("t", 2)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    # the publisher's clock one hour before the last request, one minute of skew allowed
    summary = ingest_capture(cap, pub, topics, lambda: parse_rfc3339_ms(last_ms) - 3_600_000, max_future_ms=60_000)
    dead = [Codec("dead_letter").decode(r.value) for r in pub.records if r.topic == topics.dead_letter.name]
    assert dead and all("max_future_skew_s" in d["reason"] and "60 s" in d["reason"] for d in dead)
    assert summary.rejected["requests.jsonl"] > 0
    assert WALL_MS > parse_rfc3339_ms(last_ms)  # the shared clock of the other tests is after the evidence
