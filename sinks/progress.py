"""The job's progress in the store: how far each unit and the broadcast have read (rows
``attribution/unit-N`` and ``attribution/broadcast`` of ``processor_checkpoints``, written by
the sink from ``facts.progress``), merged into the one checkpoint the ledger's sources use."""

from __future__ import annotations

import orjson

from gpuledger.sinks.base import Checkpoint
from gpuledger.streams.engine import merge_progress

__all__ = ["PROGRESS_PREFIX", "job_checkpoint", "progress_checkpoint"]

PROGRESS_PREFIX = "attribution/"


def progress_checkpoint(part: dict) -> tuple[str, Checkpoint]:
    """The row a progress record becomes; its seq grows with the offsets read."""
    return (PROGRESS_PREFIX + part["part"],
            Checkpoint(sum(part["next_offsets"].values()), dict(part["next_offsets"]),
                       {"part": part["part"], "first_offsets": part["first_offsets"],
                        "dead_lettered": part["dead_lettered"]}))


def job_checkpoint(store) -> Checkpoint | None:
    """Every part's latest progress, merged; None before anything was processed."""
    _, rows = store.query(
        f"SELECT processor, argMax(offsets, seq), argMax(state, seq) FROM {store.db}.processor_checkpoints "
        "WHERE startsWith(processor, %(p)s) GROUP BY processor ORDER BY processor", {"p": PROGRESS_PREFIX})
    if not rows:
        return None
    parts = []
    for _, offsets, state in rows:
        st = orjson.loads(state)
        parts.append({"part": st["part"], "next_offsets": orjson.loads(offsets), "first_offsets": st["first_offsets"],
                      "dead_lettered": st["dead_lettered"]})
    nxt, first, dead = merge_progress(parts)
    return Checkpoint(sum(nxt.values()), nxt, {"first_offsets": first, "dead_lettered": dead})
