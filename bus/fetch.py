"""How much a worker's source consumers fetch ahead of what it has processed.

librdkafka's fetch limits (``max.partition.fetch.bytes``, ``fetch.max.bytes``) count bytes
as the broker sends them: compressed record batches. What a fetch brings is held
decompressed until the application has consumed it. Source records compress very well with
lz4 (a dcgm-exporter scrape of 8 GPUs, ~10 KB of Prometheus text in Avro, by ~40x), so the
8 MB partition fetches the workers used to make held ~0.4 GB of records per partition, and a
worker's memory followed how much of each topic lay ahead to fetch (a 24-h backlog more than
a 6-h one) instead of the fleet and the read-ahead. A worker takes a few thousand records a
second; fetches of 256 KB per partition and 1 MB per request (the least librdkafka accepts:
a record of up to 1 MB must fit) deliver far more than that and hold tens of MB decoded.

The queue limit is reached all the time (a worker is slower than its fetches): librdkafka then
postpones the partition's next fetch by ``fetch.queue.backoff.ms``, 1 s by default, and looks
again only after it. A worker drains its queue in a fraction of that and waited out the rest
with nothing to read (a 1-worker run of 256 GPUs x 4 h of 10-s scrapes: 40.4 s with the
default, 14.9 s with 10 ms; worker peaks 118 and 126 MiB; BENCHMARKS.md). A postponed fetch costs no
request while the queue is still full.
"""

__all__ = ["SOURCE_FETCH"]

SOURCE_FETCH = {
    "max.partition.fetch.bytes": 262_144,  # compressed: ~10 MB of scrapes decoded
    "fetch.max.bytes": 1_048_576,  # compressed, per request; librdkafka wants >= message.max.bytes (1 MB)
    "queued.max.messages.kbytes": 8_192,  # fetched and not yet consumed: no new fetch above it
    "fetch.wait.max.ms": 100,
    "fetch.queue.backoff.ms": 10,  # a fetch postponed for a full queue: looked at again this soon
}
