"""One bad record never halts attribution: whatever a record makes the processor raise, it is
dead-lettered with its position and reason, changes no state, and every other record gives
exactly the facts of the run without it."""

from dataclasses import replace

import orjson
import pytest

from gpuledger.demo.cluster import write_capture
from gpuledger.demo.plan import RATECARDS
from gpuledger.domain.attribution import Attributor
from gpuledger.domain.k8s import OwnershipBook, WatchError
from gpuledger.domain.podresources import PodResourcesError, device_holders
from gpuledger.bus.port import Published
from gpuledger.schemas import Codec
from pipeline import MemoryPipeline, ingest, partitioned, run_capture
from plans import truth_plan

Y2100_MS = 4_102_444_800_000


def _first(topics, pub, topic: str, pred=lambda r: True) -> tuple[int, dict]:
    codec = Codec({t.name: t.schema for t in topics.all()}[topic])
    for i, r in enumerate(pub.records):
        if r.topic == topic and pred(rec := codec.decode(r.value)):
            return i, rec
    raise AssertionError(f"no record on {topic}")


def _bad_records(topics, pub) -> list[tuple[int, Published, str]]:
    """(insert before index, record, expected reason) — each one's neighbours are good records."""
    out = []
    k8s, dcgm, ref = topics.k8s.name, topics.dcgm.name, topics.reference.name
    watch, dcgm_scrape, reference = Codec("k8s_watch_event"), Codec("dcgm_scrape"), Codec("reference_document")
    i, ns = _first(topics, pub, k8s, lambda r: r["kind"] == "Namespace")
    obj = orjson.loads(ns["object_json"])
    obj["metadata"]["labels"] = "gpuledger.io/tenant=alpha"  # (a) labels as a string
    out.append((i + 1, Published(k8s, ns["uid"].encode(), watch.encode({**ns, "event_type": "MODIFIED",
                "object_json": orjson.dumps(obj).decode()}), ns["observed_at_ms"], 0),
                "WatchError: metadata.labels is a str, expected dict"))
    out.append((i + 1, Published(k8s, b"x", watch.encode({**ns, "object_json": '"just a string"'}),
                ns["observed_at_ms"], 0), "WatchError: watch object is a str"))
    i, scrape = _first(topics, pub, dcgm)  # (c) the node's first scrape stamped 2100, before its real ones
    out.append((i, Published(dcgm, scrape["node"].encode(), dcgm_scrape.encode({**scrape, "observed_at_ms": Y2100_MS}),
                Y2100_MS, None), "EventTimeError: event time 2100-01-01T00:00:00Z is more than"))
    out.append((i, Published(dcgm, scrape["node"].encode(), dcgm_scrape.encode({**scrape, "observed_at_ms": 1_000}),
                1_000, None), "before 2000-01-01"))
    i, bookmark = _first(topics, pub, k8s, lambda r: r["event_type"] == "BOOKMARK")  # (d) a bookmark far in the future
    for p in range(topics.k8s.partitions):
        out.append((i, Published(k8s, b"", watch.encode({**bookmark, "observed_at_ms": Y2100_MS}), Y2100_MS, p),
                    "EventTimeError"))
    i, cards = _first(topics, pub, ref, lambda r: r["kind"] == "ratecards")  # (e) NaN / negative rates, garbage
    card = orjson.loads(cards["document_json"])
    nan = [{**card[0], "gpu_hour": {k: {**v, "guaranteed": "NaN"} for k, v in card[0]["gpu_hour"].items()}}]
    negative = [{**card[0], "per_million_tokens": {"input": -1, "output": 1}}]
    for doc, reason in ((orjson.dumps(nan).decode(), "'NaN' is not finite"),
                        (orjson.dumps(negative).decode(), "per_million_tokens.input -1 is negative"),
                        ("{not json", "JSONDecodeError"), ('"a string"', "rate cards must be a JSON list")):
        out.append((i + 1, Published(ref, b"prod-ai-1/ratecards", reference.encode({
            **cards, "observed_at_ms": cards["observed_at_ms"] + 1, "document_json": doc}), 0, None), reason))
    out.append((i + 1, Published(ref, b"prod-ai-1/tariffs", reference.encode({**cards, "kind": "tariffs"}), 0, None),
                "unknown reference kind 'tariffs'"))
    return out


def test_bad_records_are_dead_lettered_and_the_rest_gives_the_clean_facts(tmp_path):
    capture = write_capture(replace(truth_plan(), ratecards=RATECARDS), tmp_path / "capture")
    clean, _ = run_capture(capture)
    topics, pub, _ = ingest(capture)
    bad = _bad_records(topics, pub)
    for at, record, _ in sorted(bad, key=lambda b: -b[0]):
        pub.records.insert(at, record)
    records = partitioned(topics, pub.records)
    mp = MemoryPipeline(topics)
    mp.extents(records)
    mp.feed(records)

    assert len(mp.dead) == len(bad) == mp.proc.dead_lettered
    reasons = [reason for _, reason in mp.dead]
    for _, _, want in bad:
        assert any(want in r for r in reasons), (want, reasons)
    assert all("/" in s and "@" in s for s, _ in mp.dead)  # topic/partition@offset
    assert clean.store.capacity and clean.store.utilization
    for table in ("capacity", "utilization", "requests", "demand"):
        assert {k: _unsourced(f) for k, f in getattr(mp.store, table).items()} == \
               {k: _unsourced(f) for k, f in getattr(clean.store, table).items()}, table
    assert mp.store.references == clean.store.references  # the valid card stays in force


def test_an_implausible_dcgm_value_is_a_skipped_series_counted_by_reason(tmp_path):
    capture = write_capture(truth_plan(hours=1), tmp_path / "capture")
    topics, pub, _ = ingest(capture)
    codec = Codec("dcgm_scrape")
    for i, r in enumerate(pub.records):
        if r.topic == topics.dcgm.name:
            rec = codec.decode(r.value)
            text = "\n".join(x.rsplit(" ", 1)[0] + " 1e13" if x.startswith("DCGM_FI_DEV_FB_USED{") else x
                             for x in rec["exposition"].splitlines())
            pub.records[i] = replace(r, value=codec.encode({**rec, "exposition": text}))
            break
    records = partitioned(topics, pub.records)
    mp = MemoryPipeline(topics)
    mp.extents(records)
    mp.feed(records)
    assert mp.dead == []
    skipped = mp.proc.take_series_skipped()
    assert skipped["implausible framebuffer used (not in [0, 2^50) bytes)"] >= 1 and mp.proc.series_skipped == {}
    assert all(f.fb_used_bytes is None or f.fb_used_bytes < 2 ** 50 for f in mp.store.utilization.values())


def _unsourced(fact):  # the bad records shift the good ones' offsets
    return replace(fact, src_offset=0) if hasattr(fact, "src_offset") else fact


def test_an_unexpected_exception_dead_letters_the_record_and_processing_goes_on(tmp_path, monkeypatch):
    capture = write_capture(truth_plan(hours=1), tmp_path / "capture")
    clean, _ = run_capture(capture)
    topics, pub, _ = ingest(capture)
    records = partitioned(topics, pub.records)
    poisoned = [r for r in records if r[0] == topics.dcgm.name][40]
    real = Attributor.apply_dcgm

    def apply_dcgm(self, node, exposition, observed_at_ms, pos):
        if (pos.topic, pos.partition, pos.offset) == poisoned[:3]:
            raise RuntimeError("boom")  # before the attributor changed anything, like every domain check
        return real(self, node, exposition, observed_at_ms, pos)

    monkeypatch.setattr(Attributor, "apply_dcgm", apply_dcgm)
    mp = MemoryPipeline(topics)
    mp.extents(records)
    mp.feed(records)
    assert mp.dead == [(f"{poisoned[0]}/{poisoned[1]}@{poisoned[2]}", "RuntimeError: boom")]
    assert mp.store.capacity == clean.store.capacity
    was, now = clean.store.utilization, mp.store.utilization
    lost = {k for k, f in was.items() if (f.src_topic, f.src_partition, f.src_offset) == poisoned[:3]}
    assert lost
    # the lost scrape's time is covered by the node's scrape before it (a missed scrape, within
    # the staleness limit): only that scrape's facts change, and no device loses covered time
    (t_lost, node), = {(was[k].observed_at_ms, was[k].node) for k in lost}
    before = max(f.observed_at_ms for f in was.values() if f.node == node and f.observed_at_ms < t_lost)
    assert set(was) - lost <= set(now)
    assert all(now[k].observed_at_ms == before for k in set(now) - set(was))
    for k in set(was) - lost:
        assert now[k] == was[k] or (now[k].observed_at_ms == before and replace(now[k], span_ms=was[k].span_ms) == was[k])

    def covered(facts):
        out = {}
        for f in facts.values():
            out[f.device_id] = out.get(f.device_id, 0) + f.span_ms
        return out

    assert covered(now) == covered(was)


@pytest.mark.parametrize("obj, message", [
    ({"kind": "Pod", "metadata": {"uid": "u", "name": "p", "labels": ["a"]}}, "metadata.labels is a list"),
    ({"kind": "Namespace", "metadata": {"uid": "u", "name": "n", "labels": {"gpuledger.io/tenant": 7}}},
     "metadata.labels['gpuledger.io/tenant'] is a int"),
    ({"kind": "Pod", "metadata": {"uid": "u", "name": "p"}, "spec": {"nodeName": 3}}, "spec.nodeName is a int"),
    ({"kind": "Pod", "metadata": {"uid": "u", "name": "p"}, "spec": {"containers": [{"resources": "all"}]}},
     "spec.containers[0].resources is a str"),
    ({"kind": "Pod", "metadata": {"uid": "u", "name": "p"}, "status": {"phase": ["Running"]}}, "status.phase"),
    ({"kind": "Pod", "metadata": {"uid": ["u"], "name": "p"}}, "metadata.uid is a list"),
    ([], "watch object is a list"),
])
def test_bad_shapes_are_refused_before_the_fold_changes_anything(obj, message):
    book = OwnershipBook()
    with pytest.raises(WatchError, match=message.replace("[", r"\[").replace("]", r"\]")):
        book.apply("ADDED", obj, 1_000)
    assert book.to_state() == OwnershipBook().to_state()


@pytest.mark.parametrize("response, message", [
    ({"podResources": [{"name": "p", "namespace": ["ns"], "containers": []}]}, r"podResources\[0\].namespace must be"),
    ({"podResources": [{"name": 7, "namespace": "ns"}]}, r"podResources\[0\].name must be a string"),
    ({"podResources": [{"name": "p", "namespace": "ns", "containers": "all"}]}, r"containers must be a list"),
    ({"podResources": [{"name": "p", "namespace": "ns", "containers": [{"name": {}, "devices": []}]}]},
     r"containers\[0\].name must be a string"),
    ({"podResources": [{"name": "p", "namespace": "ns", "containers": [{"name": "c", "devices": [
        {"resourceName": 1, "deviceIds": ["GPU-a"]}]}]}]}, r"resourceName must be a string"),
    ({"podResources": [{"name": "p", "namespace": "ns", "containers": [{"name": "c", "devices": [
        {"resourceName": "nvidia.com/gpu", "deviceIds": "GPU-a"}]}]}]}, r"deviceIds must be a list"),
])
def test_podresources_shapes_that_would_fail_later_are_refused_when_read(response, message):
    with pytest.raises(PodResourcesError, match=message):
        device_holders(response)
