"""The newest reference document of one kind for one cluster, read from the reference topic
itself (not the store), so a decision appended before ``process`` ran is never lost."""

from __future__ import annotations

from collections.abc import Mapping

from gpuledger.bus.changelog import last_value
from gpuledger.bus.topics import Topics
from gpuledger.schemas import Codec

__all__ = ["latest_reference"]


def latest_reference(bootstrap: str, topics: Topics, cluster_id: str, kind: str,
                     client: Mapping[str, str] | None = None) -> str | None:
    """The ``document_json`` last published under ``cluster/kind``, or None."""
    last = last_value({"bootstrap.servers": bootstrap, **(client or {}), "group.id": "gpuledger-reference-reader"},
                      topics.reference.name, 0, f"{cluster_id}/{kind}".encode())
    return None if last is None else Codec(topics.reference.schema).decode(last)["document_json"]
