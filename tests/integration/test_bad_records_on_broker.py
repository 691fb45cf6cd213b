"""Acceptance: one bad record never halts attribution, on the real broker and engine. Records
published straight onto the topics, mixed with a capture's good ones — (a) a watch event whose
labels are a string, (b) a DCGM scrape whose FB_USED (10^13 MiB) overflows Int64 in bytes,
(c) a DCGM scrape stamped 2100 before the node's real ones, (d) a BOOKMARK stamped 2100 on
every partition, (e) rate cards with a NaN and a negative rate, a garbage document and an
unknown kind after the valid card — give exactly the facts and the showback of the run
without them; each one refused is in the dead-letter topic with its position and reason, and
`process --until-caught-up` reads past them all and exits 0; `replay` refuses the same ones."""

import time
import uuid
from dataclasses import replace

import orjson
import pytest

from gpuledger.config import load_settings
from gpuledger.demo.cluster import write_capture
from gpuledger.demo.plan import RATECARDS
from gpuledger.domain.timeutil import parse_rfc3339_ms
from gpuledger.bus.publisher import KafkaPublisher
from gpuledger.schemas import Codec
from gpuledger.bus.topics import ensure_topics, topics_for
from plans import truth_plan
from stack_support import BOOTSTRAP, Stack, dead_letters

pytestmark = pytest.mark.integration

Y2100_MS = 4_102_444_800_000
CLUSTER = "prod-ai-1"


def _lines(path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def _publish(stack: Stack, records: list[tuple[str, bytes, str, dict, int | None]]) -> None:
    """(topic suffix, key, schema, record, partition) straight onto the topics."""
    topics = topics_for(load_settings(topic_prefix=stack.prefix, kafka_bootstrap=BOOTSTRAP))
    ensure_topics(BOOTSTRAP, topics)
    pub, now = KafkaPublisher(BOOTSTRAP), int(time.time() * 1000)
    for suffix, key, schema, record, partition in records:
        record = {"ingested_at_ms": now, "cluster_id": CLUSTER, **record}
        pub.publish(f"{stack.prefix}.{suffix}", key, Codec(schema).encode(record), record["observed_at_ms"] or now,
                    partition)
    pub.flush()


def _scrape(line: dict, exposition: str) -> tuple:
    return ("source.dcgm", line["node"].encode(), "dcgm_scrape", {
        "observed_at_ms": parse_rfc3339_ms(line["observed_at"]), "node": line["node"], "exposition": exposition}, None)


def _fb_variant(exposition: str, value: str | None) -> str:
    """The scrape with its first FB_USED series set to ``value`` (or removed)."""
    lines, done = [], False
    for x in exposition.splitlines():
        if not done and x.startswith("DCGM_FI_DEV_FB_USED{"):
            done = True
            if value is None:
                continue
            x = x.rsplit(" ", 1)[0] + f" {value}"
        lines.append(x)
    assert done
    return "\n".join(lines) + "\n"


def _rounded(doc):
    if isinstance(doc, float):
        return round(doc, 9)
    if isinstance(doc, dict):
        return {k: _rounded(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_rounded(v) for v in doc]
    return doc


def _run(tmp_path, name: str, capture, before: list, after: list) -> Stack:
    stack = Stack(tmp_path / name, f"t{uuid.uuid4().hex[:10]}")
    _publish(stack, before)
    stack.run("ingest", str(capture))
    _publish(stack, after)
    done = stack.run("process", "--until-caught-up")  # exits 0 (checked by run): read past every bad record
    assert "caught up" in done.stderr
    return stack


def test_bad_records_are_dead_lettered_and_the_rest_gives_the_clean_facts(broker, tmp_path):
    plan = replace(truth_plan(hours=2), ratecards=RATECARDS)
    capture = write_capture(plan, tmp_path / "capture")
    dcgm, watch = _lines(capture / "dcgm.jsonl"), _lines(capture / "k8s-watch.jsonl")
    scrape = dcgm[40]
    # the same scrape, published before the capture's (which is then a repeat): without its first
    # FB_USED series in the clean run, with FB_USED = 10^13 MiB (2^63 bytes is about 8.8 * 10^12 MiB)
    clean = _run(tmp_path, "clean", capture, [_scrape(scrape, _fb_variant(scrape["exposition"], None))], [])

    ns = next(w for w in watch if w["event"]["object"]["kind"] == "Namespace")
    obj = ns["event"]["object"]
    labels_as_text = {**obj, "metadata": {**obj["metadata"], "labels": "gpuledger.io/tenant=alpha"}}
    bookmark = {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "99999"}}
    card = RATECARDS[0]
    nan_card = [{**card, "gpu_hour": {k: {**v, "guaranteed": "NaN"} for k, v in card["gpu_hour"].items()}}]
    negative_card = [{**card, "per_million_tokens": {"input": -1, "output": 1}}]
    card_ms = parse_rfc3339_ms(card["valid_from"]) + 1
    before = [
        _scrape(scrape, _fb_variant(scrape["exposition"], "1e13")),  # (b)
        ("source.k8s-watch", obj["metadata"]["uid"].encode(), "k8s_watch_event", {  # (a)
            "observed_at_ms": parse_rfc3339_ms(ns["observed_at"]), "event_type": "MODIFIED", "kind": "Namespace",
            "uid": obj["metadata"]["uid"], "name": obj["metadata"]["name"], "object_json": orjson.dumps(labels_as_text).decode()},
         None),
        ("source.dcgm", dcgm[0]["node"].encode(), "dcgm_scrape", {  # (c)
            "observed_at_ms": Y2100_MS, "node": dcgm[0]["node"], "exposition": dcgm[0]["exposition"]}, None),
        *[("source.k8s-watch", b"", "k8s_watch_event", {  # (d)
            "observed_at_ms": Y2100_MS, "event_type": "BOOKMARK", "object_json": orjson.dumps(bookmark).decode()}, p)
          for p in range(4)],
    ]
    after = [("reference.documents", f"{CLUSTER}/{kind}".encode(), "reference_document",  # (e), after the valid card
              {"observed_at_ms": card_ms, "kind": kind, "document_json": doc}, None)
             for kind, doc in (("ratecards", orjson.dumps(nan_card).decode()),
                               ("ratecards", orjson.dumps(negative_card).decode()),
                               ("ratecards", "{not json"), ("tariffs", "[]"))]
    bad = _run(tmp_path, "bad", capture, before, after)

    want = clean.facts(with_source=False)
    assert want["capacity_facts"] and want["utilization_facts"]
    assert bad.facts(with_source=False) == want
    dead = [d for d in dead_letters(f"{bad.prefix}.dead-letter") if d["stage"] == "process"]
    reasons = sorted(d["reason"] for d in dead)
    expected = ["WatchError: metadata.labels is a str", "EventTimeError: event time 2100-01-01T00:00:00Z",
                "'NaN' is not finite", "per_million_tokens.input -1 is negative", "JSONDecodeError",
                "unknown reference kind 'tariffs'"]
    for text in expected:
        assert any(text in r for r in reasons), (text, reasons)
    assert len(dead) == 1 + 1 + 4 + 4, reasons  # (a), (c), (d) on 4 partitions, (e); (b) is a skipped series
    assert all(d["source"].startswith(f"{bad.prefix}.") and "@" in d["source"] and d["raw"] for d in dead)

    # replay reads the same topics through the same processor: the same records refused, and it finishes
    replay = orjson.loads(bad.run("replay", "--period", "2026-10", "--into", "shadow").stdout)
    assert replay["dead_lettered"] == len(dead) and replay["records"] > len(dead)

    def showback(stack: Stack) -> dict:
        doc = orjson.loads(stack.run("showback", "--period", "2026-10", "--format", "json").stdout)
        return {"tenants": doc["tenants"], "platform": doc.get("platform")}
    assert _rounded(showback(bad)) == _rounded(showback(clean))  # sums in another order: equal to 1e-9; priced with the valid card: the refused ones never reached the store
