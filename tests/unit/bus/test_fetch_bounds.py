"""A worker's prefetch is bounded in decoded bytes, not only on the wire.

librdkafka's fetch limits count compressed bytes; what it fetched is held decompressed until
consumed. The scrapes of a generated fleet, batched and lz4-compressed as the publisher
sends them, show the ratio; the fetch and queue limits of the workers' source consumers,
decoded at that ratio, stay within a budget that does not depend on how much of a topic lies
ahead (the 8 MB partition fetches before held ~0.4 GB each)."""

import ast
from pathlib import Path

import lz4.frame
import pytest

from gpuledger.bench.fleet_gen import fleet_plan, publish_fleet
from gpuledger.bus.fetch import SOURCE_FETCH
from gpuledger.bus.topics import Topics
from gpuledger.bus.port import ListPublisher

RUNTIME = Path(__file__).resolve().parents[3] / "streams" / "runtime.py"
PREFETCH_BUDGET_BYTES = 64 * 2**20  # decoded records one worker may hold fetched and not yet consumed
PRODUCER_BATCH_BYTES = 1_000_000  # the publisher's batch.size: what is compressed together


@pytest.fixture(scope="module")
def dcgm_ratio() -> float:
    """Decoded / compressed bytes of a fleet's DCGM records, in producer-sized lz4 batches."""
    topics = Topics("fetch", 1)
    pub = ListPublisher({t.name: t.partitions for t in topics.all()})
    publish_fleet(fleet_plan(16, 0.5, 10, 10), pub, topics, lambda _: None)
    values = [r.value for r in pub.records if r.topic == topics.dcgm.name]
    batches, batch = [], b""
    for v in values:
        if batch and len(batch) + len(v) > PRODUCER_BATCH_BYTES:
            batches.append(batch)
            batch = b""
        batch += v
    batches.append(batch)
    raw = sum(len(b) for b in batches)
    return raw / sum(len(lz4.frame.compress(b)) for b in batches)


def test_scrapes_compress_far_more_than_fetch_limits_suggest(dcgm_ratio):
    assert dcgm_ratio > 10


def test_decoded_prefetch_fits_the_budget(dcgm_ratio):
    one_fetch = SOURCE_FETCH["fetch.max.bytes"] * dcgm_ratio  # the most one fetch response brings, decoded
    queued = SOURCE_FETCH["queued.max.messages.kbytes"] * 1024  # what may wait before the next fetch
    assert one_fetch + queued <= PREFETCH_BUDGET_BYTES, (
        f"a fetch of {SOURCE_FETCH['fetch.max.bytes']} compressed bytes holds ~{one_fetch / 2**20:.0f} MiB of "
        f"scrapes (x{dcgm_ratio:.0f}); with the queue that is over {PREFETCH_BUDGET_BYTES >> 20} MiB")
    assert SOURCE_FETCH["max.partition.fetch.bytes"] <= SOURCE_FETCH["fetch.max.bytes"]


def test_the_worker_consumers_take_the_bounded_fetches():
    """Both source consumers of the worker are built from the dict that unpacks SOURCE_FETCH,
    and nothing after it sets a fetch limit again."""
    tree = ast.parse(RUNTIME.read_text())
    bases = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
             and any(k is None and ast.unparse(v) == "SOURCE_FETCH" for k, v in zip(n.value.keys, n.value.values))]
    assert len(bases) == 1, "streams/runtime.py: the consumers' base config unpacks SOURCE_FETCH"
    base = ast.unparse(bases[0].targets[0])
    consumers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Consumer"]
    assert len(consumers) == 2
    for call in consumers:
        conf = call.args[0]
        assert ast.unparse(conf.values[0]) == base and conf.keys[0] is None
        keys = {k.value for k in conf.keys if isinstance(k, ast.Constant)}
        assert not keys & set(SOURCE_FETCH), f"streams/runtime.py:{call.lineno} overrides {keys & set(SOURCE_FETCH)}"


def test_a_fetch_postponed_for_a_full_queue_is_retried_before_the_queue_drains():
    """The queue limit is what bounds the prefetch, so it is reached whenever the worker is
    slower than the broker: librdkafka's default 1-s postponement then left the worker idle
    with an empty queue for most of each second. The retry comes well before a worker has
    consumed a full queue (~8 MB of scrapes: ~300 records, ~0.1 s at ~3,000 records/s)."""
    assert SOURCE_FETCH["fetch.queue.backoff.ms"] <= 20
