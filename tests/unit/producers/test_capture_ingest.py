"""Ingest on the in-memory publisher: keys, timestamps, partitions, dead letters."""

import orjson
import pytest

from captures import append_lines
from gpuledger.demo.cluster import write_capture
from gpuledger.producers.capture import CaptureError, ingest_capture
from gpuledger.bus.port import ListPublisher
from gpuledger.schemas import Codec
from gpuledger.bus.topics import Topics
from plans import truth_plan
from pipeline import ingest


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    return write_capture(truth_plan(hours=1), tmp_path_factory.mktemp("cap"))


def test_records_keyed_by_durable_id_with_event_time(capture):
    topics, pub, summary = ingest(capture)
    dcgm = [r for r in pub.records if r.topic == topics.dcgm.name]
    assert {r.key for r in dcgm} == {b"node-a", b"node-b"}
    first = Codec("dcgm_scrape").decode(dcgm[0].value)
    assert dcgm[0].timestamp_ms == first["observed_at_ms"]
    pods = [Codec("k8s_watch_event").decode(r.value) for r in pub.records if r.topic == topics.k8s.name and r.partition is None]
    assert pods and all(r["uid"] for r in pods)
    assert summary.records[topics.dcgm.name] == len(dcgm) == 2 * 360
    assert sum(summary.rejected.values()) == 0


def test_bookmarks_reach_every_partition(capture):
    topics, pub, _ = ingest(capture)
    marks = [r for r in pub.records if r.topic == topics.k8s.name and r.partition is not None]
    per_partition = {}
    for r in marks:
        per_partition.setdefault(r.partition, []).append(r.timestamp_ms)
    assert set(per_partition) == set(range(topics.k8s.partitions))
    assert len({len(v) for v in per_partition.values()}) == 1
    last = max(r.timestamp_ms for r in pub.records if r.topic == topics.k8s.name)
    assert all(max(v) == last for v in per_partition.values())  # the end-of-capture mark


def test_malformed_lines_dead_lettered_with_file_line_reason(tmp_path):
    cap = write_capture(truth_plan(hours=1), tmp_path / "cap")
    n = len((cap / "podresources.jsonl").read_text().splitlines())
    append_lines(cap, "podresources.jsonl", ["not json", '{"observed_at": "2026-10-01T00:00:00Z", "node": 3}'])
    topics, pub, summary = ingest(cap)
    dead = [Codec("dead_letter").decode(r.value) for r in pub.records if r.topic == topics.dead_letter.name]
    assert [(d["source"], d["reason"].split(":")[0]) for d in dead] == [
        (f"podresources.jsonl:{n + 1}", "not JSON"), (f"podresources.jsonl:{n + 2}", "node")]
    assert summary.rejected == {"podresources.jsonl": 2}
    assert dead[0]["raw"] == b"not json\n"


def test_not_a_capture(tmp_path):
    with pytest.raises(CaptureError, match="manifest.json"):
        ingest_capture(tmp_path, ListPublisher(), Topics("t", 1), lambda: 0)
    (tmp_path / "manifest.json").write_bytes(orjson.dumps({"format": "other"}))
    with pytest.raises(CaptureError, match="gpuledger-capture/1"):
        ingest_capture(tmp_path, ListPublisher(), Topics("t", 1), lambda: 0)


def test_a_reference_document_loads_on_its_own(tmp_path):
    from gpuledger.producers.capture import load_reference

    topics = Topics("t", 2)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    cards = tmp_path / "ratecards.json"
    cards.write_bytes(orjson.dumps([{"version": "2026-11-v2", "valid_from": "2026-11-01T00:00:00Z",
                                     "gpu_hour": {"H100-80GB": {"guaranteed": "2.40", "borrowed": "1.40"}}}]))
    load_reference(cards, "ratecards", "prod-ai-1", pub, topics, lambda: 0)
    (rec,) = [r for r in pub.records if r.topic == topics.reference.name]
    decoded = Codec(topics.reference.schema).decode(rec.value)
    assert rec.key == b"prod-ai-1/ratecards" and decoded["kind"] == "ratecards"
    assert orjson.loads(decoded["document_json"])[0]["version"] == "2026-11-v2"
    bad = tmp_path / "quotas.json"
    bad.write_bytes(orjson.dumps([{"tenant_id": "a", "gpu_class": "H100-80GB"}]))
    with pytest.raises(CaptureError, match=r"quotas\[0\].*guaranteed_gpus"):
        load_reference(bad, "quotas", "prod-ai-1", pub, topics, lambda: 0)
    assert len([r for r in pub.records if r.topic == topics.reference.name]) == 1  # refused, not published


def test_load_refuses_implausible_rates_and_documents_over_the_record_limit(tmp_path):
    from gpuledger.producers.capture import load_reference

    topics = Topics("t", 1)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    cards = tmp_path / "ratecards.json"
    cards.write_bytes(orjson.dumps([{"version": "v", "valid_from": "2026-11-01T00:00:00Z",
                                     "gpu_hour": {"H100-80GB": {"guaranteed": "NaN", "borrowed": "1.40"}}}]))
    with pytest.raises(CaptureError, match=r"gpu_hour\.H100-80GB\.guaranteed 'NaN' is not finite"):
        load_reference(cards, "ratecards", "prod-ai-1", pub, topics, lambda: 0)
    big = tmp_path / "quotas.json"
    big.write_bytes(orjson.dumps([{"tenant_id": "t" * 1_000_000, "gpu_class": "H100-80GB", "guaranteed_gpus": 1,
                                   "valid_from": "2026-11-01T00:00:00Z"}]))
    with pytest.raises(CaptureError, match="over the limit of 1000000 bytes"):
        load_reference(big, "quotas", "prod-ai-1", pub, topics, lambda: 0)
    assert pub.records == []


def test_live_lines_with_nulls_and_out_of_range_integers():
    from gpuledger.producers.lines import PublishSink

    topics = Topics("t", 1)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    sink = PublishSink(pub, topics, "prod-ai-1", lambda: 1_798_761_600_000)
    request = {"observed_at": "2026-10-01T00:01:00Z", "endpoint_id": "chat", "model": None, "revision": None,
               "request_id": "r-1", "tenant_id": "alpha", "project_id": None, "cost_center": None, "arrived_at": None,
               "prompt_tokens": 10, "completion_tokens": 5, "queue_s": None, "ttft_s": None, "e2e_s": 2.0,
               "outcome": "success"}
    sink.put("requests.jsonl", request)
    sink.put("requests.jsonl", {**request, "request_id": "r-2", "prompt_tokens": 2**70})
    sink.put("k8s-watch.jsonl", {"observed_at": "2026-10-01T00:00:00Z", "event": {"type": "ADDED", "object": {
        "kind": "Pod", "metadata": {"uid": "u-1", "name": "p", "namespace": "n"}, "spec": {"big": 2**70}}}})
    (req,) = [Codec("request_event").decode(r.value) for r in pub.records if r.topic == topics.requests.name]
    assert (req["model"], req["revision"], req["project_id"], req["queue_s"]) == ("", "", "", None)
    assert req["arrived_at_ms"] == req["observed_at_ms"] - 2000  # observed_at - e2e_s
    (dead,) = [Codec("dead_letter").decode(r.value) for r in pub.records if r.topic == topics.dead_letter.name]
    assert dead["source"] == "live:requests.jsonl:2" and "2^31 - 1" in dead["reason"]
    assert str(2**70).encode() in dead["raw"]
    (pod,) = [Codec("k8s_watch_event").decode(r.value) for r in pub.records if r.topic == topics.k8s.name]
    assert str(2**70) in pod["object_json"]  # kept verbatim
