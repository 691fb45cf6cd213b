"""The source systems' versions a period's evidence names, for its closed document
(domain/source_versions.py): the DCGM topic's records at the period's edges (every partition,
``PER_EDGE`` records each side) give the drivers and GPU models; the request facts give each
model service's model and revision."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException

from gpuledger.domain.source_versions import exposition_versions, versions_document
from gpuledger.schemas import Codec, CodecError
from gpuledger.sinks.query import QueryPort

__all__ = ["PER_EDGE", "kafka_edges", "source_versions"]

PER_EDGE = 20


def source_versions(reader: QueryPort, edges: Callable[[str, int, int], list[bytes]] | None, dcgm_topic: str,
                    from_ms: int, to_ms: int) -> dict:
    """``edges(topic, from_ms, to_ms)``: the raw records at the window's edges (None: the source
    topics cannot be read here, which the document says)."""
    found: dict[str, set[str]] = {}
    try:
        records = None if edges is None else edges(dcgm_topic, from_ms, to_ms)
    except KafkaException as exc:
        records, read = None, f"source topics could not be read: {exc}"
    else:
        read = "source topics not read (no Kafka configured for the close)"
    if records is not None:
        codec, scrapes = Codec("dcgm_scrape"), 0
        for raw in records:
            try:
                text = codec.decode(raw)["exposition"]
            except CodecError:
                continue  # a record the worker dead-lettered: it names no version it could be trusted for
            scrapes += 1
            for kind, values in exposition_versions(text).items():
                found.setdefault(kind, set()).update(values)
        read = (f"dcgm-exporter scrapes at the period's edges: the first and last {PER_EDGE} records of each "
                f"partition of {dcgm_topic} ({scrapes} scrapes)")
    _, revisions = reader.query(
        f"SELECT DISTINCT model, revision FROM {reader.db}.request_facts FINAL "
        "WHERE observed_at_ms >= %(f)s AND observed_at_ms < %(t)s", {"f": from_ms, "t": to_ms})
    return versions_document(found, [(m, r) for m, r in revisions], read)


def kafka_edges(config: dict) -> Callable[[str, int, int], list[bytes]]:
    from gpuledger.bus.sample import window_edges

    return lambda topic, from_ms, to_ms: window_edges(config, topic, from_ms, to_ms, PER_EDGE)
