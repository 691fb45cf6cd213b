"""A request is recorded once: a repeat with the same content is the same request (at-least-once
delivery), a repeat with other content is a conflict, never a replacement."""

from dataclasses import replace

from gpuledger.domain.facts import SourcePos
from gpuledger.domain.requests import request_fact, settle_requests

OCT_31 = 1_793_491_200_000 - 1_000  # 2026-10-31T23:59:59Z
EVENT = {"cluster_id": "c1", "endpoint_id": "chat", "model": "m", "revision": "r1", "request_id": "q-1",
         "tenant_id": "team-a", "project_id": "", "observed_at_ms": OCT_31, "arrived_at_ms": OCT_31 - 500,
         "outcome": "success", "prompt_tokens": 10, "completion_tokens": 5}


def fact(offset: int, **over):
    return request_fact({**EVENT, **over}, SourcePos("requests", 0, offset))


def test_the_same_request_delivered_again_is_written_once():
    write, conflicts = settle_requests([fact(0), fact(7)], {})
    assert write == [fact(0)] and conflicts == []
    write, conflicts = settle_requests([fact(9)], {fact(0).fact_id: fact(0)})
    assert write == [] and conflicts == []


def test_another_tenant_or_token_count_is_a_conflict_and_the_first_stands():
    write, conflicts = settle_requests([fact(0), fact(1, tenant_id="victim"), fact(2, completion_tokens=10**9)], {})
    assert write == [fact(0)]
    assert [f.src_offset for f, _ in conflicts] == [1, 2]
    assert "tenant_id 'victim' (recorded 'team-a')" in conflicts[0][1]
    assert "output_tokens 1000000000 (recorded 5)" in conflicts[1][1]


def test_the_same_request_in_two_months_is_one_request():
    november = fact(5, observed_at_ms=OCT_31 + 2_000)  # resent with a later time: it would move to November
    write, conflicts = settle_requests([november], {fact(0).fact_id: fact(0)})
    assert write == [] and len(conflicts) == 1 and "observed_at_ms" in conflicts[0][1]


def test_the_same_request_id_on_another_endpoint_is_another_request():
    other = fact(3, endpoint_id="embed")
    write, conflicts = settle_requests([fact(0), other], {})
    assert write == [fact(0), other] and conflicts == [] and other.fact_id != fact(0).fact_id


def test_identical_content_from_other_evidence_is_not_a_conflict():
    assert settle_requests([replace(fact(0), src_partition=3, src_offset=44)], {fact(0).fact_id: fact(0)}) == ([], [])
