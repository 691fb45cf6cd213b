"""Request events: the gateway record's mapping, the JSONL log tail (partial lines, rotation,
truncation, kill and restart) and the HTTP receiver, on real files and a real HTTP server."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from gpuledger.bus.port import ListPublisher
from gpuledger.producers.lines import MemorySink, PublishSink
from gpuledger.producers.request_auth import ReporterDirectory, ReportersFile
from gpuledger.producers.request_records import parse_body, request_line, text_line
from gpuledger.producers.requests_events import RequestHttpReceiver, RequestLogProducer
from gpuledger.producers.runtime import ProducerMetrics, StateFile
from gpuledger.schemas import Codec
from gpuledger.bus.topics import Topics
from sources.harness import Running, wait_for, wall_ms
from sources.reporters import GATEWAY_TOKEN, reporters, reporters_document

OPENAI_RESPONSE = {  # /work/shared/reference/inference/openai-chat-completion-response-dynamo-vllm.json, verbatim
    "id": "chatcmpl-aa7e69f2-bb23-47b8-8a9c-369e9f2f7c90",
    "choices": [{"index": 0, "message": {"content": "<think>\nOkay, I need to explain what Kubernetes is...",
                                          "role": "assistant"}, "finish_reason": "length"}],
    "model": "Qwen/Qwen3-0.6B", "object": "chat.completion",
    "usage": {"prompt_tokens": 12, "completion_tokens": 64, "total_tokens": 76},
}


def record(i: int, **over) -> dict:
    doc = {"request_id": f"req-{i:04d}", "endpoint_id": "qwen-shared", "model": "Qwen/Qwen3-0.6B",
           "tenant_id": f"team-{i % 3}", "project_id": "chat", "arrived_at": "2026-10-01T00:00:09.120Z",
           "finished_at": "2026-10-01T00:00:10Z", "ttft_s": 0.08,
           "usage": {"prompt_tokens": 10 + i, "completion_tokens": 2 * i, "total_tokens": 10 + 3 * i}, "status": 200}
    doc.update(over)
    return doc


def jsonl(*records: dict) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def ids(lines) -> list[str]:
    return [line["request_id"] for line in lines]


# -- the record ------------------------------------------------------------------------------

def test_an_openai_response_with_the_gateway_fields_maps_to_the_capture_line():
    doc = {**OPENAI_RESPONSE, "endpoint_id": "qwen-shared", "revision": "c1899de", "tenant_id": "team-a",
           "project_id": "chat", "arrived_at": "2026-10-01T00:00:09.120Z", "finished_at": "2026-10-01T00:00:10Z",
           "queue_s": 0.01, "ttft_s": 0.08, "status": 200}
    assert request_line(doc, 0) == {
        "observed_at": "2026-10-01T00:00:10Z", "endpoint_id": "qwen-shared", "model": "Qwen/Qwen3-0.6B",
        "revision": "c1899de", "request_id": "chatcmpl-aa7e69f2-bb23-47b8-8a9c-369e9f2f7c90", "tenant_id": "team-a",
        "project_id": "chat", "arrived_at": "2026-10-01T00:00:09.120Z", "prompt_tokens": 12, "completion_tokens": 64,
        "queue_s": 0.01, "ttft_s": 0.08, "e2e_s": 0.88, "outcome": "success"}


@pytest.mark.parametrize("given, outcome", [({"status": 200}, "success"), ({"status": "201"}, "success"),
                                            ({"status": 499}, "cancelled"), ({"status": 500}, "error"),
                                            ({"status": 429}, "error"), ({"outcome": "canceled"}, "cancelled"),
                                            ({"status": "failed"}, "error"), ({"outcome": "OK"}, "success"),
                                            ({"outcome": "exploded"}, "exploded")])
def test_outcomes(given, outcome):
    doc = {k: v for k, v in record(1).items() if k != "status"}
    assert request_line({**doc, **given}, 0)["outcome"] == outcome


def test_unix_seconds_and_derived_times():
    doc = record(1, arrived_at=1790812809.12, finished_at=None, e2e_s=0.88)
    line = request_line(doc, 5)
    assert (line["arrived_at"], line["observed_at"]) == ("2026-10-01T00:00:09.120Z", "2026-10-01T00:00:10Z")
    assert request_line(record(1, finished_at=None, arrived_at=None), 5_000)["observed_at"] == "1970-01-01T00:00:05Z"


def test_a_failed_request_without_usage_has_no_tokens_but_a_successful_one_is_left_for_the_validator():
    failed = request_line(record(1, usage=None, status=503), 0)
    assert (failed["prompt_tokens"], failed["completion_tokens"], failed["outcome"]) == (0, 0, "error")
    ok = request_line(record(1, usage=None), 0)
    assert "prompt_tokens" not in ok and "completion_tokens" not in ok


def test_text_that_is_not_a_json_object_is_wrapped_for_the_dead_letter_topic():
    line, problem = text_line(b"GET /v1/chat 200", 1_000)
    assert line == {"observed_at": "1970-01-01T00:00:01Z", "raw": "GET /v1/chat 200"} and problem.startswith("not JSON")
    assert text_line(b"[1, 2]", 0)[1] == "a JSON list, not an object"
    assert text_line(orjson.dumps(record(1)), 0) == (request_line(record(1), 0), None)


# -- the log tail ----------------------------------------------------------------------------

def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    whole = orjson.dumps(record(3)) + b"\n"
    log.write_bytes(jsonl(record(1), record(2)) + whole[:25])
    sink, metrics = MemorySink(), ProducerMetrics("requests")
    with Running(RequestLogProducer(log, metrics, state, poll_s=0.05), sink):
        wait_for(lambda: len(sink.lines) == 2)
        wait_for(lambda: state.load().get("offset") == len(jsonl(record(1), record(2))))
        time.sleep(0.3)  # several polls: the partial line stays unread
        assert ids(sink.of("requests.jsonl")) == ["req-0001", "req-0002"]
        with log.open("ab") as fh:
            fh.write(whole[25:])
        wait_for(lambda: len(sink.lines) == 3)
    assert ids(sink.of("requests.jsonl")) == ["req-0001", "req-0002", "req-0003"]
    assert sink.flushed == 3 and state.load()["offset"] == log.stat().st_size
    assert metrics.registry.get_sample_value("gpuledger_producer_records_total",
                                             {"source": "requests", "file": "requests.jsonl"}) == 3


def test_rotation_finishes_the_old_file_then_reads_the_new_one(tmp_path):
    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    log.write_bytes(jsonl(record(1), record(2)))
    sink = MemorySink()
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), sink):
        wait_for(lambda: len(sink.lines) == 2)
        with log.open("ab") as old:  # the writer keeps its descriptor across the rename
            log.rename(tmp_path / "access.log.1")
            old.write(jsonl(record(3)) + orjson.dumps(record(4)))  # its last line never terminated
            old.flush()
            time.sleep(0.2)
            log.write_bytes(jsonl(record(5), record(6)))
        wait_for(lambda: len(sink.lines) == 6)
        wait_for(lambda: state.load().get("ino") == log.stat().st_ino and state.load()["offset"] == log.stat().st_size)
    assert ids(sink.of("requests.jsonl")) == [f"req-{i:04d}" for i in range(1, 7)]


def test_truncation_reads_again_from_the_start(tmp_path):
    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    log.write_bytes(jsonl(record(1), record(2), record(3)))
    sink = MemorySink()
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), sink):
        wait_for(lambda: len(sink.lines) == 3)
        inode = log.stat().st_ino
        with log.open("r+b") as fh:  # copytruncate
            fh.truncate(0)
        wait_for(lambda: state.load().get("offset") == 0)
        log.write_bytes(jsonl(record(4)))
        wait_for(lambda: len(sink.lines) == 4)
        assert log.stat().st_ino == inode
    assert ids(sink.of("requests.jsonl")) == ["req-0001", "req-0002", "req-0003", "req-0004"]


def test_a_restart_resumes_at_the_saved_offset(tmp_path):
    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    log.write_bytes(jsonl(record(1), record(2)))
    first, second = MemorySink(), MemorySink()
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), first):
        wait_for(lambda: len(first.lines) == 2)
    with log.open("ab") as fh:
        fh.write(jsonl(record(3)))
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), second):
        wait_for(lambda: len(second.lines) == 1)
        time.sleep(0.2)
    assert ids(second.of("requests.jsonl")) == ["req-0003"]


def test_a_log_rotated_while_the_producer_was_down_is_read_from_its_start(tmp_path):
    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    log.write_bytes(jsonl(record(1), record(2)))
    first, second = MemorySink(), MemorySink()
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), first):
        wait_for(lambda: len(first.lines) == 2)
    log.rename(tmp_path / "access.log.1")
    log.write_bytes(jsonl(record(3)))  # a new file, shorter than the saved offset or not: another inode
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), second):
        wait_for(lambda: len(second.lines) == 1)
    assert ids(second.of("requests.jsonl")) == ["req-0003"]


class Killed(BaseException):
    """The process died (SIGKILL): nothing after this point runs."""


class DyingSink(MemorySink):
    """Dies at its ``put_limit``-th put, or right after its ``flush_limit``-th flush returned."""

    def __init__(self, put_limit: int | None = None, flush_limit: int | None = None) -> None:
        super().__init__()
        self.put_limit, self.flush_limit, self.flushes = put_limit, flush_limit, [0]

    def put(self, file: str, line: dict) -> None:
        if self.put_limit is not None and len(self.lines) + 1 == self.put_limit:
            raise Killed
        super().put(file, line)

    def flush(self) -> None:
        super().flush()
        self.flushes.append(self.flushed)
        if self.flush_limit is not None and len(self.flushes) - 1 == self.flush_limit:
            raise Killed


N_RECORDS = 12


def _killed_then_restarted(tmp_path: Path, dying: DyingSink) -> tuple[list[str], list[str]]:
    """Run until the sink dies, restart with the same state; (durable ids of the first run, ids of the second)."""
    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    log.write_bytes(jsonl(*(record(i) for i in range(N_RECORDS))))
    one_line = len(jsonl(record(0)))
    with pytest.raises(Killed):
        RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05,
                           batch_bytes=3 * one_line).run(dying, threading.Event(), wall_ms)
    durable = ids(line for _, line in dying.lines[:dying.flushed])
    restarted = MemorySink()
    with Running(RequestLogProducer(log, ProducerMetrics("requests"), state, poll_s=0.05), restarted):
        wait_for(lambda: restarted.lines and restarted.lines[-1][1]["request_id"] == f"req-{N_RECORDS - 1:04d}")
    return durable, ids(restarted.of("requests.jsonl"))


@pytest.mark.parametrize("put_limit", [1, 2, 4, 7, 12])
def test_killed_before_a_flush_loses_nothing_and_repeats_nothing(tmp_path, put_limit):
    durable, after = _killed_then_restarted(tmp_path, DyingSink(put_limit=put_limit))
    assert durable + after == [f"req-{i:04d}" for i in range(N_RECORDS)]


@pytest.mark.parametrize("flush_limit", [1, 2, 3])
def test_killed_after_a_flush_before_the_save_repeats_only_that_batch(tmp_path, flush_limit):
    dying = DyingSink(flush_limit=flush_limit)
    durable, after = _killed_then_restarted(tmp_path, dying)
    everything = [f"req-{i:04d}" for i in range(N_RECORDS)]
    last_batch = durable[dying.flushes[-2]:dying.flushes[-1]]
    assert last_batch and after[:len(last_batch)] == last_batch  # flushed, not saved: put again
    assert durable + after[len(last_batch):] == everything  # and nothing lost


def test_bad_lines_reach_the_dead_letter_topic_with_a_reason(tmp_path, capsys):
    log = tmp_path / "access.log"
    good = record(1)
    no_id = {k: v for k, v in record(2).items() if k != "request_id"}
    log.write_bytes(jsonl(good) + b"GET /v1/chat/completions 200\n" + b"[1, 2]\n" + jsonl(no_id, record(3, usage=None)))
    topics = Topics("t", 1)
    publisher = ListPublisher({t.name: t.partitions for t in topics.all()})
    sink, metrics = PublishSink(publisher, topics, "prod-ai-1", wall_ms), ProducerMetrics("requests")
    with Running(RequestLogProducer(log, metrics, StateFile(tmp_path / "state.json"), poll_s=0.05), sink):
        wait_for(lambda: sum(sink.summary.records.values()) == 5)
    requests = [Codec(topics.requests.schema).decode(r.value) for r in publisher.records if r.topic == topics.requests.name]
    assert [r["request_id"] for r in requests] == ["req-0001"] and requests[0]["prompt_tokens"] == 11
    dead = [Codec("dead_letter").decode(r.value) for r in publisher.records if r.topic == topics.dead_letter.name]
    assert [d["reason"] for d in dead] == ["endpoint_id: Field required", "endpoint_id: Field required",
                                           "request_id: Field required", "prompt_tokens: Field required"]
    assert b"GET /v1/chat/completions 200" in dead[0]["raw"] and b"[1, 2]" in dead[1]["raw"]
    assert publisher.flushed == len(publisher.records)
    assert metrics.registry.get_sample_value("gpuledger_producer_errors_total",
                                             {"source": "requests", "reason": "not_json"}) == 2
    assert "access.log byte " in capsys.readouterr().err


def test_a_failing_sink_is_retried_from_the_saved_offset(tmp_path):
    class FlakySink(MemorySink):
        failures = 2

        def flush(self) -> None:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("broker down")
            super().flush()

    log, state = tmp_path / "access.log", StateFile(tmp_path / "state.json")
    log.write_bytes(jsonl(record(1), record(2)))
    sink, metrics = FlakySink(), ProducerMetrics("requests")
    with Running(RequestLogProducer(log, metrics, state, poll_s=0.05), sink):
        wait_for(lambda: sink.flushed > 0)
    assert ids(sink.of("requests.jsonl")) == ["req-0001", "req-0002"] * 3  # at least once, nothing skipped
    assert metrics.registry.get_sample_value("gpuledger_producer_errors_total", {"source": "requests", "reason": "sink"}) == 2


# -- the HTTP receiver -----------------------------------------------------------------------

def post(port: int, body: bytes, path: str = "/v1/requests", token: str | None = GATEWAY_TOKEN) -> tuple[int, dict]:
    auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                     headers={"Content-Type": "application/json", **auth})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_records_one_array_or_jsonl_are_accepted_after_the_flush():
    sink, metrics = MemorySink(), ProducerMetrics("requests")
    receiver = RequestHttpReceiver("127.0.0.1:0", metrics, reporters())
    assert receiver.port > 0
    with Running(receiver, sink):
        assert post(receiver.port, orjson.dumps(record(1))) == (202, {"accepted": 1, "rejected": []})
        assert sink.flushed == 1
        assert post(receiver.port, orjson.dumps([record(2), record(3)])) == (202, {"accepted": 2, "rejected": []})
        assert post(receiver.port, jsonl(record(4), record(5))) == (202, {"accepted": 2, "rejected": []})
        assert sink.flushed == 5
        status, answer = post(receiver.port, b"request 6 finished")
        assert status == 400 and "line 1 is not JSON" in answer["error"]
        status, answer = post(receiver.port, b"[1]")
        assert status == 400 and "record 0 is a JSON int" in answer["error"]
        assert post(receiver.port, b"")[0] == 400
        assert post(receiver.port, orjson.dumps(record(7)), path="/v1/other")[0] == 404
    assert ids(sink.of("requests.jsonl")) == [f"req-{i:04d}" for i in range(1, 6)]
    assert sink.of("requests.jsonl")[0] == request_line(record(1), 0)
    assert metrics.registry.get_sample_value("gpuledger_producer_errors_total",
                                             {"source": "requests", "reason": "bad_body"}) == 3


def test_http_answers_only_once_the_sink_flushed_and_503_when_it_failed():
    release = threading.Event()

    class SlowSink(MemorySink):
        fail = False

        def flush(self) -> None:
            if not release.wait(10):
                raise TimeoutError("never released")
            if self.fail:
                raise ConnectionError("broker down")
            super().flush()

    sink = SlowSink()
    receiver = RequestHttpReceiver("127.0.0.1:0", ProducerMetrics("requests"), reporters())
    answers = []
    with Running(receiver, sink):
        client = threading.Thread(target=lambda: answers.append(post(receiver.port, orjson.dumps(record(1)))))
        client.start()
        wait_for(lambda: len(sink.lines) == 1)  # put, flush in progress
        time.sleep(0.3)
        assert answers == []  # no answer before the flush returned
        release.set()
        client.join(10)
        assert answers == [(202, {"accepted": 1, "rejected": []})]
        sink.fail = True
        status, answer = post(receiver.port, orjson.dumps(record(2)))
        assert status == 503 and "retry" in answer["error"]


def test_http_records_that_cannot_be_mapped_are_dead_lettered():
    topics = Topics("t", 1)
    publisher = ListPublisher({t.name: t.partitions for t in topics.all()})
    sink = PublishSink(publisher, topics, "prod-ai-1", wall_ms)
    receiver = RequestHttpReceiver("127.0.0.1:0", ProducerMetrics("requests"), reporters())
    with Running(receiver, sink):
        assert post(receiver.port, orjson.dumps([record(1), record(2, outcome="exploded", status=None)]))[0] == 202
    dead = [Codec("dead_letter").decode(r.value) for r in publisher.records if r.topic == topics.dead_letter.name]
    assert [d["reason"] for d in dead] == ["outcome: Value error, outcome must be success, error or cancelled, got 'exploded'"]
    assert sum(1 for r in publisher.records if r.topic == topics.requests.name) == 1


def test_listen_must_be_host_and_port():
    with pytest.raises(ValueError, match="host:port"):
        RequestHttpReceiver("8089x", ProducerMetrics("requests"), reporters())


def test_parse_body_shapes():
    assert parse_body(b'{"a": 1}') == [{"a": 1}]
    assert parse_body(b'[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]
    assert parse_body(b'{"a": 1}\n\n{"a": 2}\n') == [{"a": 1}, {"a": 2}]
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        parse_body(b'{"a": 1}\n{"a": \n')


# -- who may report ------------------------------------------------------------------------------

TEAM_A_TOKEN = "team-a-gateway-token"


def _publishing_receiver(directory=None):
    topics = Topics("t", 1)
    publisher = ListPublisher({t.name: t.partitions for t in topics.all()})
    sink = PublishSink(publisher, topics, "prod-ai-1", wall_ms)
    directory = directory or reporters(("team-a-gw", TEAM_A_TOKEN, ["team-a"], ["qwen-a"]),
                                       ("central", GATEWAY_TOKEN, ["*"], ["*"]))
    return RequestHttpReceiver("127.0.0.1:0", ProducerMetrics("requests"), directory), sink, publisher, topics


def _dead(publisher, topics) -> list[dict]:
    return [Codec("dead_letter").decode(r.value) for r in publisher.records if r.topic == topics.dead_letter.name]


def _published(publisher, topics) -> list[dict]:
    return [Codec("request_event").decode(r.value) for r in publisher.records if r.topic == topics.requests.name]


@pytest.mark.parametrize("token", [None, "", "wrong-token", TEAM_A_TOKEN + "x"])
def test_a_reporter_without_a_known_token_is_refused_and_nothing_is_kept(token):
    receiver, sink, publisher, topics = _publishing_receiver()
    with Running(receiver, sink):
        status, answer = post(receiver.port, orjson.dumps(record(1, tenant_id="victim")), token=token)
    assert status == 401 and "Bearer" in answer["error"]
    assert publisher.records == []


def test_a_reporter_cannot_report_for_another_tenant_or_endpoint():
    receiver, sink, publisher, topics = _publishing_receiver()
    ok = record(1, tenant_id="team-a", endpoint_id="qwen-a")
    other_tenant = record(2, tenant_id="victim", endpoint_id="qwen-a")
    other_endpoint = record(3, tenant_id="team-a", endpoint_id="qwen-victim")
    with Running(receiver, sink):
        status, answer = post(receiver.port, orjson.dumps([ok, other_tenant, other_endpoint]), token=TEAM_A_TOKEN)
        assert status == 202 and answer["accepted"] == 1
        assert [(r["index"], r["request_id"]) for r in answer["rejected"]] == [(1, "req-0002"), (2, "req-0003")]
        assert "tenant 'victim'" in answer["rejected"][0]["reason"]
        status, answer = post(receiver.port, orjson.dumps(other_tenant), token=TEAM_A_TOKEN)
        assert status == 422 and answer["accepted"] == 0  # nothing published: not a 202
        assert post(receiver.port, orjson.dumps(other_tenant))[0] == 202  # the central gateway may
    assert [(e["request_id"], e["tenant_id"]) for e in _published(publisher, topics)] == [
        ("req-0001", "team-a"), ("req-0002", "victim")]
    reasons = [d["reason"] for d in _dead(publisher, topics)]
    assert reasons == ["reporter 'team-a-gw' may not report for tenant 'victim'",
                       "reporter 'team-a-gw' may not report for endpoint 'qwen-victim'",
                       "reporter 'team-a-gw' may not report for tenant 'victim'"]


def test_records_the_validator_dead_letters_are_named_in_the_answer():
    receiver, sink, publisher, topics = _publishing_receiver()
    huge = record(2, usage={"prompt_tokens": 2 ** 62, "completion_tokens": 1})
    with Running(receiver, sink):
        status, answer = post(receiver.port, orjson.dumps([record(1), huge]))
    assert status == 202 and answer["accepted"] == 1
    assert answer["rejected"][0]["index"] == 1 and "prompt_tokens" in answer["rejected"][0]["reason"]
    assert [e["request_id"] for e in _published(publisher, topics)] == ["req-0001"]


def test_bodies_over_the_limit_are_refused_unread():
    receiver, sink, publisher, topics = _publishing_receiver()
    with Running(receiver, sink):
        conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
        conn.putrequest("POST", "/v1/requests")
        conn.putheader("Authorization", f"Bearer {GATEWAY_TOKEN}")
        conn.putheader("Content-Length", str(RequestHttpReceiver.MAX_BODY_BYTES + 1))
        conn.endheaders()  # the body is never sent: the answer comes from the headers alone
        response = conn.getresponse()
        assert response.status == 413 and "smaller batches" in json.loads(response.read())["error"]
        conn.close()
    assert publisher.records == []


def test_the_reporters_file_is_read_again_when_it_changes(tmp_path):
    path = tmp_path / "reporters.json"
    path.write_bytes(reporters_document(("gw", "first-token", ["*"], ["*"])))
    said = []
    file = ReportersFile(path, said.append)
    assert file.get().identify("Bearer first-token").name == "gw"
    path.write_bytes(reporters_document(("gw", "rotated-token", ["*"], ["*"])))
    assert file.get().identify("Bearer first-token") is None  # revoked without a restart
    assert file.get().identify("Bearer rotated-token").name == "gw"
    path.write_bytes(b"{not json")
    assert file.get().identify("Bearer rotated-token").name == "gw"  # a broken edit keeps the last good one
    assert any("previous reporters stay in force" in m for m in said)


@pytest.mark.parametrize("doc, match", [
    (b'{"version": "1", "reporters": [{"name": "a", "token_sha256": "abc", "tenants": ["*"], "endpoints": ["*"]}]}',
     "64 hex digits"),
    (b'{"version": "1", "reporters": [{"name": "a", "token_sha256": "' + b"0" * 64 + b'", "tenants": [], '
     b'"endpoints": ["*"]}]}', "tenants"),
    (b'{"version": "1", "reporters": [{"name": "a", "token": "plain", "tenants": ["*"], "endpoints": ["*"]}]}',
     "token"),
])
def test_a_bad_reporters_document_is_refused_with_its_reason(doc, match):
    with pytest.raises(ValueError, match=match):
        ReporterDirectory.parse(doc)


def test_the_shipped_reporters_document_lets_nobody_in():
    shipped = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "requests-reporters.json"
    directory = ReporterDirectory.parse(shipped.read_bytes(), str(shipped))
    assert directory.reporters == [] and directory.identify(f"Bearer {GATEWAY_TOKEN}") is None


def test_silent_clients_hold_a_slot_only_until_the_read_timeout_and_the_rest_wait_no_longer():
    class Quick(RequestHttpReceiver):
        READ_TIMEOUT_S, MAX_CONNECTIONS = 15.0, 2  # long enough for a loaded machine to see the slots held

    receiver, sink = Quick("127.0.0.1:0", ProducerMetrics("requests"), reporters()), MemorySink()
    with Running(receiver, sink):
        silent = []
        for _ in range(Quick.MAX_CONNECTIONS):
            sock = socket.create_connection(("127.0.0.1", receiver.port))
            sock.sendall(f"POST /v1/requests HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {GATEWAY_TOKEN}\r\n"
                         "Content-Length: 100\r\n\r\n".encode())  # a body that never comes
            silent.append(sock)
        held_since = time.monotonic()
        # A held slot is the receiver's own count, not a guess about when its threads reach a socket.
        wait_for(lambda: receiver.in_progress == Quick.MAX_CONNECTIONS, "both slots held by the silent clients",
                 timeout_s=Quick.READ_TIMEOUT_S)
        assert post(receiver.port, orjson.dumps(record(1)))[0] == 503  # every slot held: refused at once
        for sock in silent:
            sock.settimeout(25)
            sock.recv(64)  # dropped at the read timeout
            sock.close()
        assert time.monotonic() - held_since < Quick.READ_TIMEOUT_S + 3.0  # freed by the timeout, not later
        assert post(receiver.port, orjson.dumps(record(2)))[0] == 202
    assert ids(sink.of("requests.jsonl")) == ["req-0002"]
