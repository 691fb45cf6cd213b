"""Ownership fold: identity by UID and by time, never by name."""

import orjson
from pathlib import Path

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
