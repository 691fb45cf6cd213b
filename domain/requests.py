"""Productive work: one fact per finished model-server request, kept whole (tokens, outcome,
queue / time-to-first-token / end-to-end latency) so distributions stay queryable per
tenant, endpoint and model. The id is the endpoint's request id: a request reported twice
is one fact."""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.facts import SourcePos, fact_id

__all__ = ["RequestFact", "request_fact"]


@dataclass(frozen=True)
class RequestFact:
    fact_id: str
    cluster_id: str
    endpoint_id: str
    model: str
    revision: str
    request_id: str
    tenant_id: str
    project_id: str
    observed_at_ms: int
    arrived_at_ms: int
    outcome: str
    input_tokens: int
    output_tokens: int
    queue_s: float | None
    ttft_s: float | None
    e2e_s: float | None
    src_topic: str
    src_partition: int
    src_offset: int


def request_fact(r: dict, pos: SourcePos) -> RequestFact:
    if r["prompt_tokens"] < 0 or r["completion_tokens"] < 0:
        raise ValueError(f"request {r['request_id']}: token counts must not be negative")
    return RequestFact(
        fact_id=fact_id("request", r["cluster_id"], r["endpoint_id"], r["request_id"]),
        cluster_id=r["cluster_id"], endpoint_id=r["endpoint_id"], model=r["model"], revision=r.get("revision", ""),
        request_id=r["request_id"], tenant_id=r["tenant_id"], project_id=r.get("project_id", ""),
        observed_at_ms=r["observed_at_ms"], arrived_at_ms=r["arrived_at_ms"], outcome=r["outcome"],
        input_tokens=r["prompt_tokens"], output_tokens=r["completion_tokens"], queue_s=r.get("queue_s"),
        ttft_s=r.get("ttft_s"), e2e_s=r.get("e2e_s"),
        src_topic=pos.topic, src_partition=pos.partition, src_offset=pos.offset)
