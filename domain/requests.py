"""Productive work: one fact per finished model-server request, kept whole (tokens, outcome,
queue / time-to-first-token / end-to-end latency) so distributions stay queryable per
tenant, endpoint and model. The id is the endpoint's request id: a request reported twice
is one fact. A request is recorded once: an event that repeats a known request with other
content (another tenant, other tokens, another time) is a conflict, not a replacement
(``settle_requests``), so the same request cannot move between tenants or months."""

from __future__ import annotations

from dataclasses import dataclass

from gpuledger.domain.facts import SourcePos, fact_id

__all__ = ["RequestFact", "conflict_reason", "request_fact", "settle_requests"]


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


_EVIDENCE = ("src_topic", "src_partition", "src_offset")
_CONTENT = tuple(f for f in RequestFact.__dataclass_fields__ if f not in _EVIDENCE and f != "fact_id")


def conflict_reason(known: RequestFact, event: RequestFact) -> str | None:
    """Why ``event`` conflicts with the ``known`` fact of the same id (None: same content)."""
    differ = [f for f in _CONTENT if getattr(known, f) != getattr(event, f)]
    if not differ:
        return None
    said = ", ".join(f"{f} {getattr(event, f)!r} (recorded {getattr(known, f)!r})" for f in differ[:4])
    return (f"RequestConflict: request {event.request_id!r} of endpoint {event.endpoint_id!r} was recorded from "
            f"{known.src_topic}/{known.src_partition}@{known.src_offset}; this event says {said}: "
            "the recorded one stands")


def settle_requests(events: list[RequestFact], known: dict[str, RequestFact]
                    ) -> tuple[list[RequestFact], list[tuple[RequestFact, str]]]:
    """(facts to write, conflicts with their reasons) of ``events`` in arrival order, given the
    ``known`` facts of their ids. The first content recorded for an id stands; a repeat with the
    same content is not written again (the first evidence stays the fact's source)."""
    seen = dict(known)
    write, conflicts = [], []
    for event in events:
        first = seen.get(event.fact_id)
        if first is None:
            seen[event.fact_id] = event
            write.append(event)
            continue
        reason = conflict_reason(first, event)
        if reason is not None:
            conflicts.append((event, reason))
    return write, conflicts
