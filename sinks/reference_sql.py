"""The reference history (SQL as tested values).

``reference_history`` keeps every document published (sinks/schema_sql.py). A store written
before it existed holds its documents in ``reference_documents`` only (one per cluster and
kind, which a later document replaces): they are read too, as published before everything in
the history (``published_at_ms`` -1), and copied into it before the first document a writer
stores (``kept_documents_sql``), so a later one replacing them there loses nothing. A
document in both is read once.

Pricing chooses the entries in force from the documents (domain/reference_history.py); a
dashboard or an analyst's query reads them with ``entries_in_force_sql``, the same choice in
SQL."""

from __future__ import annotations

from gpuledger.domain.reference_history import ENTRY_KEYS

__all__ = ["ENTRY_KINDS", "entries_in_force_sql", "history_sql", "inventory_documents_sql", "kept_documents_sql"]

ENTRY_KINDS = tuple(ENTRY_KEYS)  # the kinds whose entries price


def kept_documents_sql(db: str) -> str:
    """Copy the documents ``reference_documents`` holds that the history does not into it,
    as published at -1 (before everything in it)."""
    return f"""INSERT INTO {db}.reference_history (cluster_id, kind, observed_at_ms, published_at_ms, document)
        SELECT cluster_id, kind, observed_at_ms, -1, document FROM {db}.reference_documents FINAL
        WHERE (cluster_id, kind, observed_at_ms, document) NOT IN (
            SELECT cluster_id, kind, observed_at_ms, document FROM {db}.reference_history)"""


def history_sql(db: str, every_cluster: bool = False) -> str:
    """Every document of kind ``%(kind)s`` published for the clusters ``%(clusters)s`` (with
    ``every_cluster``: for any cluster): (cluster, published_at_ms, observed_at_ms, document),
    per cluster the latest publication first (ties: by observed_at_ms, then the document,
    descending: the order ``MemoryStore.reference_history`` gives)."""
    where = "kind = %(kind)s" + ("" if every_cluster else " AND cluster_id IN %(clusters)s")
    return f"""SELECT cluster_id, max(published) AS published_at_ms, observed_at_ms, document FROM (
            SELECT cluster_id, published_at_ms AS published, observed_at_ms, document
            FROM {db}.reference_history FINAL WHERE {where}
            UNION ALL
            SELECT cluster_id, toInt64(-1) AS published, observed_at_ms, document
            FROM {db}.reference_documents FINAL WHERE {where})
        GROUP BY cluster_id, observed_at_ms, document
        ORDER BY cluster_id, published_at_ms DESC, observed_at_ms DESC, document DESC"""


def entries_in_force_sql(db: str) -> str:
    """The entries in force of ``ENTRY_KINDS`` for the clusters with capacity facts: every
    document published (the history, and what ``reference_documents`` alone holds, as published
    at -1) split into its entries, and per kind and entry key (domain/reference_history.py
    ``ENTRY_KEYS``: a card's version; a quota's tenant, class and valid_from; an endpoint's id
    and valid_from; a credit's and a decision's id) the entry of the latest publication (ties:
    by observed_at_ms, then the document: the order of ``history_sql``). Columns: ``kind``,
    ``entry`` (its JSON), ``pos`` (its place in its document, from 1), ``published`` (its
    document's publication, ms). Each entry then applies by its own dates, which the reader
    checks. Unlike pricing, a document that does not parse is not left out."""
    where = (f"kind IN ({', '.join(repr(k) for k in ENTRY_KINDS)}) "
             f"AND cluster_id IN (SELECT cluster_id FROM {db}.capacity_facts)")
    valid_from = "toString(parseDateTime64BestEffortOrZero(JSONExtractString(item, 'valid_from'), 3, 'UTC'))"
    return f"""SELECT kind, argMax((item, place), (published_at_ms, observed_at_ms, document)) AS latest,
          latest.1 AS entry, latest.2 AS pos, max(published_at_ms) AS published
        FROM (SELECT kind, published_at_ms, observed_at_ms, document, JSONExtractArrayRaw(document) AS items
              FROM (SELECT kind, published_at_ms, observed_at_ms, document FROM {db}.reference_history FINAL
                    WHERE {where}
                    UNION ALL
                    SELECT kind, toInt64(-1), observed_at_ms, document FROM {db}.reference_documents FINAL
                    WHERE {where}))
        ARRAY JOIN items AS item, arrayEnumerate(items) AS place
        GROUP BY kind, multiIf(kind = 'ratecards', [JSONExtractRaw(item, 'version')],
          kind = 'quotas', [JSONExtractRaw(item, 'tenant_id'), JSONExtractRaw(item, 'gpu_class'), {valid_from}],
          kind = 'endpoints', [JSONExtractRaw(item, 'endpoint_id'), {valid_from}],
          kind = 'credits', [JSONExtractRaw(item, 'credit_id')],
          [JSONExtractRaw(item, 'assignment_id')])"""


def inventory_documents_sql(db: str) -> str:
    """The inventory documents whose GPU entries or unavailability windows price the window
    ``[%(f)s, %(t)s)`` for the clusters ``%(clusters)s``: those the inventory tables kept
    them from (their ``document_ms`` is the document's publication), oldest first."""
    overlaps = "cluster_id IN %(clusters)s AND {a} < %(t)s AND {b} > %(f)s"
    return f"""SELECT document FROM {db}.reference_history FINAL
        WHERE kind = 'inventory' AND cluster_id IN %(clusters)s AND published_at_ms IN (
            SELECT document_ms FROM {db}.inventory_gpus FINAL
            WHERE {overlaps.format(a="valid_from_ms", b="coalesce(valid_to_ms, %(t)s)")}
            UNION DISTINCT SELECT document_ms FROM {db}.inventory_unavailable FINAL
            WHERE {overlaps.format(a="from_ms", b="to_ms")})
        ORDER BY published_at_ms, observed_at_ms, document"""
