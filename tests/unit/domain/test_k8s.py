"""Ownership fold: identity by UID and by time, never by name."""

import random
from pathlib import Path

import orjson

from gpuledger.demo.builder import namespace_object, pod_object
from gpuledger.domain.k8s import OwnershipBook
from gpuledger.domain.timeutil import parse_rfc3339_ms

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kubernetes"


def test_reused_pod_name_resolves_by_time():
    book = OwnershipBook()
    book.apply("ADDED", pod_object("ns", "trainer-0", "uid-1", "n", 1_000, 1), 1_000)
    book.apply("DELETED", pod_object("ns", "trainer-0", "uid-1", "n", 1_000, 1, "Succeeded"), 5_000)
    book.apply("ADDED", pod_object("ns", "trainer-0", "uid-2", "n", 7_000, 1), 7_000)
    assert book.pod_at("ns", "trainer-0", 4_999).uid == "uid-1"
    assert book.pod_at("ns", "trainer-0", 5_000) is None
    assert book.pod_at("ns", "trainer-0", 7_000).uid == "uid-2"


def test_namespace_owner_change_and_recreation():
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("team", "ns-1", 0, "beta"), 0)
    book.apply("MODIFIED", namespace_object("team", "ns-1", 0, "gamma"), 10_000)
    assert book.namespace_at("team", 9_999).tenant_id == "beta"
    assert book.namespace_at("team", 10_000).tenant_id == "gamma"
    # deleted, then re-created with a new UID; the DELETED arrives after the ADDED (other partition)
    book.apply("ADDED", namespace_object("team", "ns-2", 30_000, "delta"), 30_000)
    book.apply("DELETED", namespace_object("team", "ns-1", 0, "gamma"), 20_000)
    assert book.namespace_at("team", 19_999).uid == "ns-1"
    assert book.namespace_at("team", 25_000) is None
    assert book.namespace_at("team", 30_000).tenant_id == "delta"
    assert book.namespace_changes("team", 0, 40_000) == [10_000, 20_000, 30_000]


def test_state_round_trip():
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("team", "ns-1", 0, "beta"), 0)
    book.apply("ADDED", pod_object("team", "p", "uid-1", "n", 0, 1), 0)
    again = OwnershipBook.from_state(orjson.loads(orjson.dumps(book.to_state())))
    assert again.to_state() == book.to_state()
    assert again.pod_at("team", "p", 5).uid == "uid-1"


def test_reference_watch_events_fold_without_error():
    book = OwnershipBook()
    kinds = []
    for line in (FIXTURES / "watch-events.constructed.jsonl").read_text().splitlines():
        ev = orjson.loads(line)
        kinds.append(book.apply(ev["type"], ev["object"], parse_rfc3339_ms("2026-09-01T10:00:00Z")))
    assert kinds.count("bookmark") == 1 and kinds.count("error") == 1
    assert len(book.pods) == 1


def test_same_pod_at_is_pod_at_twice():
    """Over names one pod bore, names reused by later pods, pods still running and names never
    seen, at instants on and around every start and end."""
    import random

    rng = random.Random(4)
    book = OwnershipBook()
    edges = set()
    for n in range(40):
        name, at = (f"p-{n % 13}" if n < 26 else f"q-{n}"), rng.randrange(0, 50_000)
        end = None if rng.random() < 0.3 else at + rng.choice([1, 500, 5_000, 20_000])
        book.apply("ADDED", pod_object("ns", name, f"uid-{n}", "node-1", at, 1), at)
        edges.add(at)
        if end is not None:
            book.apply("DELETED", pod_object("ns", name, f"uid-{n}", "node-1", at, 1, "Succeeded"), end)
            edges.add(end)
    instants = sorted({e + d for e in edges for d in (-1, 0, 1)})
    single = reused = differ = 0
    for name in [*(f"p-{i}" for i in range(14)), *(f"q-{i}" for i in range(26, 40))]:
        uids = book.pods_by_name.get(f"ns/{name}", [])
        single += len(uids) == 1
        reused += len(uids) > 1
        for _ in range(200):
            a, b = rng.choice(instants), rng.choice(instants)
            expected = book.pod_at("ns", name, a) == book.pod_at("ns", name, b)
            assert book.same_pod_at("ns", name, a, b) is expected, (name, a, b)
            differ += not expected
    assert single and reused and differ > 100
