"""The attributor asks the book for closed demand only when the book or the watch watermark
changed since it last asked (``OwnershipBook.version``): every pass of a worker advances, and
most passes change neither. A change the watermark does not show (an event observed before it)
still makes its fact."""

import gpuledger.domain.attribution as attribution
from gpuledger.demo.builder import namespace_object, pod_object
from gpuledger.domain.attribution import NEG_INF, Attributor
from gpuledger.domain.k8s import OwnershipBook

T0 = 1_788_000_000_000
S, M, H = 1_000, 60_000, 3_600_000


def _attributor() -> Attributor:
    att = Attributor("c1", 300_000, 120_000)
    att.apply_watch("ADDED", namespace_object("team-a", "ns-a", T0 - H, "alpha"), T0 - H)
    att.apply_watch("ADDED", pod_object("team-a", "job", "p1", "", T0, 2, "Pending", unschedulable=True), T0)
    return att


def _demand(att: Attributor, watermark: int) -> list:
    att.advance(watermark, NEG_INF)
    return att.drain().demand


def test_an_event_behind_the_watermark_still_makes_its_fact_at_the_same_watermark():
    att = _attributor()
    assert [f.outcome for f in _demand(att, T0 + 10 * M)] == ["pending"]
    assert _demand(att, T0 + 10 * M) == []  # nothing changed: nothing new
    # bound and running at T0 + 5 min, observed before the watermark the attributor already has
    att.apply_watch("MODIFIED", pod_object("team-a", "job", "p1", "node-1", T0, 2, "Running",
                                           scheduled_ms=T0 + 4 * M, started_ms=T0 + 5 * M), T0 + 5 * M)
    facts = _demand(att, T0 + 10 * M)
    assert [(f.outcome, f.waited_from_ms, f.waited_to_ms) for f in facts] == [("scheduled", T0, T0 + 5 * M)]


def test_closed_demand_is_asked_again_only_after_a_change(monkeypatch):
    calls = []
    real = attribution.closed_demand

    def counted(*args):
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(attribution, "closed_demand", counted)
    att = _attributor()
    for _ in range(3):
        _demand(att, T0 + 10 * M)
    assert calls == [T0 + 10 * M]
    _demand(att, T0 + 11 * M)  # the watermark moved
    att.apply_watch("BOOKMARK", {}, T0 + 11 * M)  # a bookmark changes nothing
    _demand(att, T0 + 11 * M)
    att.book.prune(T0)  # a prune changes the book
    _demand(att, T0 + 11 * M)
    assert calls == [T0 + 10 * M, T0 + 11 * M, T0 + 11 * M]


def test_a_book_changes_version_with_every_event_folded_and_every_prune_and_books_never_share_one():
    book, other = OwnershipBook(), OwnershipBook()
    seen = [book.version, other.version]
    book.apply("ADDED", namespace_object("team-a", "ns-a", T0, "alpha"), T0)
    seen.append(book.version)
    book.apply("ADDED", pod_object("team-a", "job", "p1", "node-1", T0, 1), T0)
    seen.append(book.version)
    book.apply("MODIFIED", pod_object("team-a", "job", "p1", "node-1", T0, 1, "Succeeded"), T0 + M)
    seen.append(book.version)
    book.apply("BOOKMARK", {}, T0 + H)
    assert book.version == seen[-1]
    book.prune(T0 + H)
    seen.append(book.version)
    seen.append(OwnershipBook.from_state(book.to_state()).version)
    assert len(set(seen)) == len(seen) == 7


def test_the_demand_done_of_pods_the_book_dropped_is_forgotten_and_only_then_asked_again():
    att = _attributor()
    att.apply_watch("ADDED", pod_object("team-a", "job-2", "p2", "", T0, 1, "Pending", unschedulable=True), T0)
    _demand(att, T0 + 10 * M)
    uids = {key.split("/", 1)[0] for key in att.demand_done}
    assert len(uids) == 2
    att.forget_demand_done()
    assert {key.split("/", 1)[0] for key in att.demand_done} == uids  # nothing left the book
    gone = "p2"
    att.apply_watch("DELETED", pod_object("team-a", "job-2", "p2", "", T0, 1, "Pending", unschedulable=True),
                    T0 + 11 * M)
    _demand(att, T0 + 12 * M)
    att.forget_demand_done()
    assert gone in {key.split("/", 1)[0] for key in att.demand_done}  # still in the book: kept
    assert att.book.prune(T0 + 20 * M) >= 1 and gone not in att.book.pods
    att.forget_demand_done()
    assert {key.split("/", 1)[0] for key in att.demand_done} == uids - {gone}
    att.demand_done.add(f"{gone}/ended")  # (a key of a dropped pod, put back behind the book's back)
    att.forget_demand_done()
    assert f"{gone}/ended" in att.demand_done  # no pod left the book since: not asked again
