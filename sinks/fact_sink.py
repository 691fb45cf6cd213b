"""The end of the fact topics: values read from Kafka -> facts -> the store.

``FactSink.write`` takes a poll's worth of ``(kind, value)`` messages (``write_grouped``: each
kind's values as a poll gathers them, where a worker's batch record that passed the checks
whole stands for its facts, ``gather``). The bulk kinds (capacity, utilization, health: nearly
every fact) go to the store as they came, in an Avro container ClickHouse reads itself, once
every value passed the codec's checks: a batch record's facts are copied once, from the record
into the container. Anything else,
and a bulk kind with a value that fails them or that the store refuses for good, is decoded
kind by kind (streams/fact_codec.py) and written in one batch through ``write_isolating``
(sinks/isolate.py), so:

- a value that is not a fact of its kind (bad bytes, an unknown kind, a NaN) is dead-lettered
  with the reason and skipped; the rest are written;
- a row the store refuses for good is found by bisection and dead-lettered alone, as the raw
  value it came in, under the source record it was derived from; the rest are written;
- a request event that repeats a recorded request with other content is dead-lettered with
  ``"RequestConflict: ..."`` (domain/requests.py ``settle_requests``): the recorded one stands;
- a store that refuses the table whatever the rows raises ``PermanentStoreError`` and one that
  is down raises a transient ``StoreError``: nothing is dead-lettered for that, and the caller
  writes the same messages again (facts are idempotent: a rewrite changes nothing; a dead
  letter for an undecodable value may then repeat, a fact is never lost). Kafka offsets are
  committed only after ``write`` returns.

Dead-letter reasons follow the processor's: ``"FactCodecError: ..."`` for a value that could
not be decoded, ``"StoreRejected: <table> row <fact_id>: ..."`` for a refused row. The source
is ``"<src_topic>/<partition>@<offset>"`` of the record the fact came from when it carries one,
else ``"<kind>:<fact_id>"``; for an undecodable value, ``"<kind>#<i>"``, ``i`` its index in
``messages``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from gpuledger.domain.facts import FactBatch
from gpuledger.sinks.base import FactStore, PermanentStoreError
from gpuledger.sinks.isolate import TABLES, settle_batch, write_isolating
from gpuledger.streams.fact_batches import batch_container, checked_batch, split_batch
from gpuledger.streams.fact_codec import BULK_KINDS, FACT_KINDS, FactCodecError, checked_kept, container, decode_facts

__all__ = ["CheckedBatch", "DeadLetter", "FactSink"]

DeadLetter = Callable[[str, str, bytes], None]  # (source, reason, raw)
_KIND_OF_TABLE = {table: kind for kind, table in TABLES.items()}


class CheckedBatch(NamedTuple):
    """A batch record whose every fact passed the checks (streams/fact_batches.py
    ``checked_batch``), kept as it came among a kind's values: its facts are copied once, into
    the store's container, or split into single values when they take the fact-by-fact path."""

    value: bytes
    count: int  # its facts
    kept: list | None  # each fact's observed_at_ms (utilization)
    spans: tuple  # (count, from, to) of each block of its array


class _Decoded:
    """One kind's values of one write: the facts, and the raw value of each (for dead letters)."""

    def __init__(self, values: list[bytes]) -> None:
        self.values, self.bad = values, set()
        self.facts: list = []
        self._raw_of: dict[int, bytes] | None = None

    def raw(self, fact) -> bytes:
        if self._raw_of is None:  # only once a row is refused: the common write never pays for it
            good = [v for i, v in enumerate(self.values) if i not in self.bad]
            self._raw_of = {id(f): v for f, v in zip(self.facts, good)}
        return self._raw_of.get(id(fact), b"")


class FactSink:
    """Writes decoded facts to ``store``; hands what it cannot write to ``dead_letter``."""

    def __init__(self, store: FactStore, dead_letter: DeadLetter) -> None:
        self.store, self.dead_letter = store, dead_letter
        self.undecodable = 0  # values dead-lettered because they are not facts (over the sink's life)
        self.refused = 0  # rows dead-lettered because the store refused them for good
        self.conflicts = 0  # request events dead-lettered because they contradict a recorded request
        self.stored_observed_ms: list[int] = []  # the last write's utilization facts: their samples' observed_at

    def write(self, messages: Iterable[tuple[str, bytes]]) -> dict[str, int]:
        """Decode and write ``messages``; returns the facts stored per kind (written now or
        recorded before; every kind of ``FACT_KINDS`` present, 0 when none). Raises
        ``StoreError`` as described above."""
        values: dict[str, list[bytes]] = {k: [] for k in FACT_KINDS}
        index: dict[str, list[int]] = {k: [] for k in FACT_KINDS}
        for i, (kind, value) in enumerate(messages):
            bucket = values.get(kind)
            if bucket is None:
                self._unknown_kind(f"{kind}#{i}", kind, value)
                continue
            bucket.append(value)
            index[kind].append(i)
        return self._write(values, index)

    def write_grouped(self, by_kind: dict[str, list]) -> dict[str, int]:
        """``write`` of each kind's values of ``by_kind`` in turn, as a poll gathers them, without
        a pair a fact: the same facts stored, dead letters (a value named by its place in that
        order, a ``CheckedBatch`` standing for its facts) and counts. The lists are read, never
        changed (a write retried reads them again)."""
        values: dict[str, list] = {k: [] for k in FACT_KINDS}
        index: dict[str, Sequence[int]] = {k: [] for k in FACT_KINDS}
        at = 0
        for kind, vs in by_kind.items():
            n = sum(v.count if type(v) is CheckedBatch else 1 for v in vs) if kind in BULK_KINDS else len(vs)
            if kind in values:
                values[kind], index[kind] = vs, range(at, at + n)
            else:
                for j, value in enumerate(vs):
                    self._unknown_kind(f"{kind}#{at + j}", kind, value)
            at += n
        return self._write(values, index)

    def _write(self, values: dict[str, list], index: dict[str, Sequence[int]]) -> dict[str, int]:
        whole = self._write_bulk(values, index)  # the common case: most facts never become objects here

        decoded: dict[str, _Decoded] = {}
        for kind in FACT_KINDS:
            d = decoded[kind] = _Decoded(values[kind])
            if d.values:
                def bad(j: int, raw: bytes, reason: str, d=d, at=index[kind], kind=kind) -> None:
                    d.bad.add(j)
                    self._undecodable(f"{kind}#{at[j]}", reason, raw)
                d.facts = decode_facts(kind, d.values, bad)

        refused = dict.fromkeys(FACT_KINDS, 0)

        def reject(table: str, fact, exc: PermanentStoreError) -> None:
            kind = _KIND_OF_TABLE[table]
            refused[kind] += 1
            self.refused += 1
            self.dead_letter(_source(kind, fact), f"StoreRejected: {table} row {fact.fact_id}: {exc}",
                             decoded[kind].raw(fact))

        def conflict(fact, reason: str) -> None:
            self.conflicts += 1
            refused["requests"] += 1
            self.dead_letter(_source("requests", fact), reason, decoded["requests"].raw(fact))

        batch = FactBatch(**{k: decoded[k].facts for k in FACT_KINDS})
        if any(decoded[k].facts for k in FACT_KINDS):
            batch = settle_batch(self.store, batch, conflict)
            write_isolating(self.store, batch, reject)
        self.stored_observed_ms = whole.pop("observed", []) + [f.observed_at_ms for f in batch.utilization]
        return {k: whole.get(k, 0) + len(decoded[k].facts) - refused[k] for k in FACT_KINDS}

    def _write_bulk(self, values: dict[str, list], index: dict[str, Sequence[int]]) -> dict:
        """Hand the store each bulk kind's values as they came, when every one passes the
        codec's checks (``checked_kept``; a kind of ``CheckedBatch`` records only passed them
        already and goes as their arrays' blocks); those kinds are then taken out of ``values``.
        A kind with a value that fails, or that the store refuses for good, is left for the
        fact-by-fact path, which finds the value or row at fault. A store that is down raises
        (nothing is lost: the caller writes the same messages again)."""
        out: dict = {}
        for kind in BULK_KINDS:
            vs = values[kind]
            if not vs:
                continue
            if all(type(v) is CheckedBatch for v in vs):  # a worker's batch records: checked already
                payload, count = batch_container(kind, [(b.value, b.spans) for b in vs]), sum(b.count for b in vs)
                kept = list(itertools.chain.from_iterable(b.kept for b in vs)) if kind == "utilization" else None
            else:
                vs = values[kind] = _singles(kind, vs)
                kept = checked_kept(kind, vs)
                if kept is None:
                    continue
                payload, count = container(kind, vs), len(vs)
            try:
                self.store.write_encoded(kind, payload)
            except PermanentStoreError:
                values[kind] = _singles(kind, vs)
                continue
            out[kind] = count
            if kind == "utilization":
                out["observed"] = kept
            values[kind], index[kind] = [], []
        return out

    def gather(self, values: list, kind: str, value: bytes, source: str) -> int:
        """Add the facts of a batch record of ``kind`` read at ``source`` ("topic/partition@offset")
        to ``values`` (the kind's values for ``write_grouped``) and return how many: the record
        as it came (a ``CheckedBatch``) when every fact of it passes the checks, else its facts
        as single values (``unbatch``: none when it is not a whole batch)."""
        if kind in BULK_KINDS:
            checked = checked_batch(kind, value)
            if checked is not None:
                if checked[0]:
                    values.append(CheckedBatch(value, *checked))
                return checked[0]
        facts = self.unbatch(kind, value, source)
        values += facts
        return len(facts)

    def unbatch(self, kind: str, value: bytes, source: str) -> list[bytes]:
        """The facts of a batch record of ``kind`` read at ``source`` ("topic/partition@offset"),
        each a single value for ``write``; none when it is not a whole batch, then dead-lettered
        whole, with the reason (no fact boundary can be trusted past a broken one)."""
        try:
            return split_batch(kind, value)
        except FactCodecError as exc:
            self._undecodable(source, str(exc), value)
            return []

    def _unknown_kind(self, source: str, kind: str, raw: bytes) -> None:
        self._undecodable(source, f"unknown fact kind {kind!r}; kinds are {', '.join(FACT_KINDS)}", raw)

    def _undecodable(self, source: str, reason: str, raw: bytes) -> None:
        self.undecodable += 1
        self.dead_letter(source, f"FactCodecError: {reason}", bytes(raw or b""))


def _singles(kind: str, values: list) -> list[bytes]:
    """``values`` with each ``CheckedBatch`` among them split into its facts' single values (in
    place of it); ``values`` itself when it holds none."""
    if not any(type(v) is CheckedBatch for v in values):
        return values
    out: list[bytes] = []
    for v in values:
        if type(v) is CheckedBatch:
            out += split_batch(kind, v.value)
        else:
            out.append(v)
    return out


def _source(kind: str, fact) -> str:
    topic = getattr(fact, "src_topic", "")
    if topic:
        return f"{topic}/{fact.src_partition}@{fact.src_offset}"
    return f"{kind}:{fact.fact_id}"
