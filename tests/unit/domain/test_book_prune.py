"""OwnershipBook.prune: forgetting what ended before a point changes no lookup at or after it,
keeps later folds as they were, and keeps the book's size bounded by what is live."""

import copy
import random

import orjson
import pytest

from gpuledger.demo.builder import namespace_object, pod_object
from gpuledger.domain.demand import closed_demand, prune_done
from gpuledger.domain.k8s import OwnershipBook

T0 = 1_788_000_000_000  # 2026-08-29
MIN, HOUR = 60_000, 3_600_000


# -- random watch histories ---------------------------------------------------------------
class History:
    """A watch stream: namespaces added, relabelled, deleted and re-created under the same
    name; pods added, running, terminal, deleted (terminal ones sometimes hours later, as
    garbage collection does) and re-created under the same name with a new UID. It starts
    with a list of objects created before it; events of different objects may be swapped;
    lines may be sent again with their first time (a capture published twice) or restamped
    (a producer resuming its watch)."""

    def __init__(self, rng: random.Random, steps: int, dup_rate: float = 0.04) -> None:
        self.rng = rng
        self.t = T0
        self.events: list[tuple[str, str, dict, int]] = []  # (object uid, type, object, observed_at)
        self.n = 0
        self.ns_names = [f"team-{i}" for i in range(4)]
        self.pod_names = [(ns, f"job-{j}") for ns in self.ns_names for j in range(3)]
        self.ns_live: dict[str, tuple[str, int, str]] = {}  # name -> (uid, created, tenant)
        self.pod_live: dict[str, list] = {}  # uid -> [ns, name, created, phase, mig, node]
        for name in self.ns_names[:3]:  # listed when the watch starts: created before it
            self._ns_add(name, self.t - rng.randint(1, 48) * HOUR)
        for ns, name in self.pod_names[::2]:
            self._pod_add(ns, name, self.t - rng.randint(1, 30) * HOUR, phase=rng.choice(["Running", "Pending"]))
        for _ in range(steps):
            self.t += rng.randint(1, 240) * 1000
            self._step(dup_rate)
        self._swap_neighbours()

    def _uid(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n}"

    def _put(self, uid: str, kind: str, obj: dict, t: int | None = None) -> None:
        self.events.append((uid, kind, obj, self.t if t is None else t))

    def _ns_add(self, name: str, created: int) -> None:
        uid, tenant = self._uid("ns"), self.rng.choice("abcd")
        self.ns_live[name] = (uid, created, tenant)
        self._put(uid, "ADDED", namespace_object(name, uid, created, tenant))

    def _pod_add(self, ns: str, name: str, created: int, phase: str = "Pending") -> None:
        uid = self._uid("pod")
        mig = self.rng.choice(["", "", "1g.10gb", "3g.40gb"])
        node = self.rng.choice(["n1", "n2"]) if phase == "Running" or self.rng.random() < 0.5 else ""
        self.pod_live[uid] = [ns, name, created, phase, mig, node]
        self._put(uid, "ADDED", self._pod_obj(uid))

    def _pod_obj(self, uid: str) -> dict:
        ns, name, created, phase, mig, node = self.pod_live[uid]
        return pod_object(ns, name, uid, node, created, 1, phase, mig_profile=mig)

    def _step(self, dup_rate: float) -> None:  # noqa: C901 - one branch per kind of change
        rng, r = self.rng, self.rng.random()
        if r < dup_rate and len(self.events) > 5:
            i = rng.randrange(len(self.events) - 1)
            again = self.events[i:i + rng.randint(1, 30)]
            if rng.random() < 0.5:
                self.events += [(u, k, o, t) for u, k, o, t in again]  # published twice: first times
            else:
                self.events += [(u, k, o, self.t) for u, k, o, _ in again]  # a resumed watch: restamped
            return
        if r < 0.15:
            name = rng.choice(self.ns_names)
            if name not in self.ns_live:
                self._ns_add(name, self.t)
            elif rng.random() < 0.6:
                uid, created, _ = self.ns_live[name]
                tenant = rng.choice("abcd")
                self.ns_live[name] = (uid, created, tenant)
                self._put(uid, "MODIFIED", namespace_object(name, uid, created, tenant))
            else:
                uid, created, tenant = self.ns_live.pop(name)
                self._put(uid, "DELETED", namespace_object(name, uid, created, tenant))
            return
        by_name = {(p[0], p[1]): uid for uid, p in self.pod_live.items()}
        ns, name = rng.choice(self.pod_names)
        uid = by_name.get((ns, name))
        if uid is None:
            self._pod_add(ns, name, self.t)
            return
        life = self.pod_live[uid]
        if life[3] == "Pending":
            life[3], life[5] = ("Running", life[5] or rng.choice(["n1", "n2"])) if rng.random() < 0.7 else ("Failed",
                                                                                                           life[5])
            self._put(uid, "MODIFIED", self._pod_obj(uid))
        elif life[3] == "Running" and rng.random() < 0.5:
            life[3] = rng.choice(["Succeeded", "Failed"])
            self._put(uid, "MODIFIED", self._pod_obj(uid))
        elif life[3] == "Running" or rng.random() < 0.3:  # deleted while running, or garbage-collected
            self._put(uid, "DELETED", self._pod_obj(uid))
            del self.pod_live[uid]

    def _swap_neighbours(self) -> None:
        """Events of different objects arrive out of order (other partitions); one object's stay in order."""
        ev = self.events
        for _ in range(2):
            for i in range(len(ev) - 1):
                if ev[i][0] != ev[i + 1][0] and self.rng.random() < 0.3:
                    ev[i], ev[i + 1] = ev[i + 1], ev[i]


def _fold(book: OwnershipBook, events) -> None:
    for _, kind, obj, t in events:
        book.apply(kind, obj, t)


def _clone(book: OwnershipBook) -> OwnershipBook:
    return OwnershipBook.from_state(orjson.loads(orjson.dumps(book.to_state())))


def _edges(book: OwnershipBook) -> set[int]:
    out = set()
    for p in book.pods.values():
        out.update(x for x in (p.start_ms, p.end_ms, p.running_ms) if x is not None)
    for vs in book.namespaces.values():
        out.update(x for v in vs for x in (v.from_ms, v.to_ms) if x is not None)
    return out


def _answers(book: OwnershipBook, h: History, times: list[int], since: int) -> list:
    out = []
    for t in times:
        out += [("pod_at", ns, name, t, book.pod_at(ns, name, t)) for ns, name in h.pod_names]
        out += [("namespace_at", ns, t, book.namespace_at(ns, t)) for ns in h.ns_names]
    ends = sorted(times)
    for ns in h.ns_names:
        for a in ends[::7]:
            out += [("changes", ns, a, b, book.namespace_changes(ns, a, b)) for b in (a + 1, a + HOUR, ends[-1] + 1)]
        out.append(("changes", ns, since, ends[-1] + 1, book.namespace_changes(ns, since, ends[-1] + 1)))
    return out


def _times(rng: random.Random, books, since: int, until: int) -> list[int]:
    edges = {e + d for b in books for e in _edges(b) for d in (-1, 0, 1)}
    return sorted({since, *(e for e in edges if e >= since), *(rng.randint(since, until) for _ in range(40))})


def _assert_same_from(full: OwnershipBook, pruned: OwnershipBook, h: History, rng: random.Random, p: int,
                      where: str) -> None:
    until = max(t for *_, t in h.events) + HOUR
    times = _times(rng, (full, pruned), p, until)
    assert _answers(pruned, h, times, p) == _answers(full, h, times, p), where
    for uid, life in pruned.pods.items():  # kept pods are untouched, and so is their namespace at their start
        assert life == full.pods[uid], where
        assert pruned.namespace_at(life.namespace, life.start_ms) == full.namespace_at(life.namespace,
                                                                                        life.start_ms), where


# -- (a) property: lookups at or after the prune point answer as before ---------------------
@pytest.mark.parametrize("seed", range(40))
def test_prune_changes_no_lookup_at_or_after_the_prune_point(seed):
    rng = random.Random(seed)
    h = History(rng, steps=rng.randint(40, 400))
    for _ in range(4):
        cut = rng.randint(1, len(h.events))
        full = OwnershipBook()
        _fold(full, h.events[:cut])
        seen = [t for *_, t in h.events[:cut]]
        if rng.random() < 0.5:
            p = rng.randint(min(seen) - 2 * HOUR, max(seen) + HOUR)
        else:  # on or next to an end or a change: where what to keep is decided
            p = rng.choice(sorted(_edges(full))) + rng.choice([-1, 0, 1, rng.randint(-5 * MIN, 5 * MIN)])
        pruned = _clone(full)
        dropped = pruned.prune(p)
        where = f"seed {seed}, {cut} events, prune at {p - T0}"
        assert dropped == len(full.pods) - len(pruned.pods) + sum(map(len, full.namespaces.values())) - sum(
            map(len, pruned.namespaces.values())), where
        assert all(life.end_ms is None or life.end_ms >= p for life in pruned.pods.values()), where
        assert set(pruned.pods) == {u for u, life in full.pods.items() if life.end_ms is None or life.end_ms >= p}
        assert {u for uids in pruned.pods_by_name.values() for u in uids} == set(pruned.pods), where
        for name, vs in full.namespaces.items():  # a namespace that still exists keeps its open version
            for v in vs:
                if v.to_ms is None:
                    assert v in pruned.namespaces[name], where
        _assert_same_from(full, pruned, h, rng, p, where)
        again = _clone(pruned)  # the checkpoint keeps what pruning left, prune point and tombstones too
        assert again.to_state() == pruned.to_state(), where
        _assert_same_from(full, again, h, rng, p, where + " (from state)")
        assert pruned.prune(p) == 0, where  # pruning again at the same point drops nothing more


@pytest.mark.parametrize("seed", range(25))
def test_folding_after_prunes_answers_and_emits_demand_as_without(seed):
    """A worker: fold a batch, advance the watermark, emit closed demand, then prune to the
    watermark less a horizon (and the demand set with it). Duplicates, restamped or not, of
    pods and namespaces already forgotten arrive later; they must not bring them back."""
    rng = random.Random(1000 + seed)
    h = History(rng, steps=rng.randint(200, 600), dup_rate=0.08)
    horizon, lag = rng.choice([15 * MIN, HOUR]), 10 * MIN
    full, pruned = OwnershipBook(), OwnershipBook()
    done_full, done_pruned = set(), set()
    facts_full, facts_pruned = [], []
    latest, i = None, 0
    while i < len(h.events):
        batch = h.events[i:i + rng.randint(1, 40)]
        i += len(batch)
        for book in (full, pruned):
            _fold(book, batch)
        latest = max([latest or batch[0][3], *(t for *_, t in batch)])
        wm = latest - lag  # events of different objects are late by a few minutes at most
        facts_full += closed_demand(full, "c", wm, done_full)
        facts_pruned += closed_demand(pruned, "c", wm, done_pruned)
        if rng.random() < 0.5:
            pruned.prune(wm - horizon)
            prune_done(done_pruned, pruned)
            assert {k.split("/", 1)[0] for k in done_pruned} <= set(pruned.pods)  # "uid" or "uid/ended"
            if rng.random() < 0.3:
                pruned = _clone(pruned)  # a restart from the checkpoint
    where = f"seed {seed}, horizon {horizon}"
    assert facts_pruned == facts_full, where
    assert len({f.fact_id for f in facts_pruned}) == len(facts_pruned), where
    if pruned.pruned_before_ms is not None:
        _assert_same_from(full, pruned, h, rng, pruned.pruned_before_ms, where)
        assert len(pruned.pods) < len(full.pods), where


# -- the cases the property covers, one by one ----------------------------------------------
def test_terminal_pod_deleted_hours_after_it_was_forgotten_stays_forgotten():
    book = OwnershipBook()
    book.apply("ADDED", pod_object("ns", "p", "u1", "n", T0, 1, "Pending", mig_profile="1g.10gb"), T0)
    book.apply("MODIFIED", pod_object("ns", "p", "u1", "n", T0, 1, "Running", mig_profile="1g.10gb"), T0 + MIN)
    book.apply("MODIFIED", pod_object("ns", "p", "u1", "n", T0, 1, "Succeeded", mig_profile="1g.10gb"), T0 + 2 * MIN)
    done: set[str] = set()
    assert sorted(f.outcome for f in closed_demand(book, "c", T0 + 3 * MIN, done)) == ["completed", "pending",
                                                                                        "scheduled"]
    assert book.prune(T0 + HOUR) == 1 and prune_done(done, book) == 3 and not done and not book.pods_by_name
    for kind, phase, t in (("MODIFIED", "Succeeded", T0 + 2 * HOUR), ("DELETED", "Succeeded", T0 + 5 * HOUR),
                           ("MODIFIED", "Running", T0 + 6 * HOUR)):  # GC, then a resumed watch sending lines again
        book.apply(kind, pod_object("ns", "p", "u1", "n", T0, 1, phase, mig_profile="1g.10gb"), t)
        assert book.pods == {} and book.pod_at("ns", "p", t) is None
        assert closed_demand(book, "c", t + HOUR, done) == []


def test_pod_listed_at_start_is_remembered_by_uid_once_forgotten():
    book = OwnershipBook()
    created = T0 - 30 * HOUR  # older than anything the book saw: it came from the first list
    book.apply("ADDED", pod_object("ns", "old", "u-old", "n", created, 1), T0)
    book.apply("ADDED", pod_object("ns", "new", "u-new", "n", T0 + MIN, 1), T0 + MIN)
    book.apply("DELETED", pod_object("ns", "old", "u-old", "n", created, 1), T0 + 2 * MIN)
    book.apply("DELETED", pod_object("ns", "new", "u-new", "n", T0 + MIN, 1), T0 + 3 * MIN)
    assert book.prune(T0 + HOUR) == 2
    assert book.pod_tombstones == {"u-old"}  # u-new is recognised by its creation time instead
    book = _clone(book)
    book.apply("MODIFIED", pod_object("ns", "old", "u-old", "n", created, 1), T0 + 2 * HOUR)
    book.apply("MODIFIED", pod_object("ns", "new", "u-new", "n", T0 + MIN, 1), T0 + 2 * HOUR)
    assert book.pods == {}


def test_a_pod_older_than_the_book_is_learned_late_and_a_new_one_any_time():
    book = OwnershipBook()
    book.apply("ADDED", pod_object("ns", "a", "u-a", "n", T0, 1), T0)
    book.prune(T0 + HOUR)
    # a pod whose events were all before the retained stream: known from its next change on
    book.apply("MODIFIED", pod_object("ns", "long", "u-long", "n", T0 - 9 * HOUR, 1), T0 + 2 * HOUR)
    book.apply("ADDED", pod_object("ns", "b", "u-b", "n", T0 + 2 * HOUR, 1), T0 + 2 * HOUR)
    assert set(book.pods) == {"u-a", "u-long", "u-b"}


def test_deleted_namespace_does_not_come_back_and_a_recreated_one_does():
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("team", "ns-1", T0, "a"), T0)
    book.apply("MODIFIED", namespace_object("team", "ns-1", T0, "b"), T0 + MIN)
    book.apply("DELETED", namespace_object("team", "ns-1", T0, "b"), T0 + 2 * MIN)
    assert book.prune(T0 + HOUR) == 2 and book.namespaces == {}
    book.apply("ADDED", namespace_object("team", "ns-1", T0, "a"), T0 + 2 * HOUR)  # a resumed watch, restamped
    book.apply("MODIFIED", namespace_object("team", "ns-1", T0, "b"), T0 + 2 * HOUR)
    assert book.namespace_at("team", T0 + 3 * HOUR) is None and book.namespaces == {}
    book.apply("ADDED", namespace_object("team", "ns-2", T0 + 2 * HOUR, "c"), T0 + 2 * HOUR)
    assert book.namespace_at("team", T0 + 3 * HOUR).uid == "ns-2"


def test_a_waiting_pod_keeps_the_namespace_version_it_started_under():
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("team", "ns-1", T0, "a"), T0)
    book.apply("ADDED", pod_object("team", "w", "u-w", "", T0 + MIN, 1, "Pending", mig_profile="3g.40gb"), T0 + MIN)
    book.apply("MODIFIED", namespace_object("team", "ns-1", T0, "b"), T0 + 10 * MIN)
    book.apply("MODIFIED", namespace_object("team", "ns-1", T0, "c"), T0 + 20 * MIN)
    assert book.prune(T0 + 2 * HOUR) == 1  # the "b" version: nothing needs it
    assert [v.tenant_id for v in book.namespaces["team"]] == ["a", "c"]
    book.apply("MODIFIED", pod_object("team", "w", "u-w", "n", T0 + MIN, 1, "Running", mig_profile="3g.40gb"),
               T0 + 3 * HOUR)
    pending, fact = sorted(closed_demand(book, "c", T0 + 4 * HOUR, set()), key=lambda f: f.outcome)
    assert fact.tenant_id == "a" and fact.waited_from_ms == T0 + MIN and fact.outcome == "scheduled"
    assert (pending.tenant_id, pending.outcome) == ("a", "pending")


def test_a_checkpoint_from_before_pruning_existed_still_loads():
    book = OwnershipBook()
    book.apply("ADDED", namespace_object("team", "ns-1", T0, "a"), T0)
    book.apply("ADDED", pod_object("team", "p", "u1", "n", T0, 1), T0)
    book.apply("DELETED", pod_object("team", "p", "u1", "n", T0, 1), T0 + MIN)
    old = {k: v for k, v in book.to_state().items() if k in ("namespaces", "pods")}
    restored = OwnershipBook.from_state(old)
    assert restored.origin_ms is None and restored.prune(T0 + HOUR) == 1
    assert restored.pod_tombstones == {"u1"}  # no origin known: what it forgets is remembered by UID
    restored.apply("DELETED", pod_object("team", "p", "u1", "n", T0, 1), T0 + 2 * HOUR)
    assert restored.pods == {}
    assert restored.namespace_at("team", T0 + HOUR).tenant_id == "a"


# -- (b) boundedness: a day of churn holds what six hours do ---------------------------------
def _churn(hours: int, prune: bool, live: int = 60, horizon: int = HOUR) -> tuple[OwnershipBook, set[str]]:
    """``live`` pods at every moment; each minute one ends (terminal or deleted; terminal ones
    are garbage-collected 20 minutes later) and another starts, some under the same name;
    namespaces relabelled every 90 minutes, one deleted and re-created every 4 hours. A
    worker prunes to its watermark less the horizon after every hour."""
    rng = random.Random(7)
    book, done, t, n = OwnershipBook(), set(), T0, 0
    names = [f"team-{i}" for i in range(6)]
    ns = {name: [f"{name}-0", T0 - 24 * HOUR, "a"] for name in names}
    for name, (uid, created, tenant) in ns.items():
        book.apply("ADDED", namespace_object(name, uid, created, tenant), t)
    pods, gc = {}, []

    def start(created: int, name: str | None = None) -> None:
        nonlocal n
        n += 1
        uid, space = f"pod-{n}", rng.choice(names)
        pods[uid] = (space, name or f"run-{n}", created, rng.choice(["", "1g.10gb"]))
        book.apply("ADDED", pod_object(*pods[uid][:2], uid, "", created, 1, "Pending", mig_profile=pods[uid][3]), t)

    for _ in range(live):
        start(T0 - rng.randint(1, 10) * HOUR)
    for minute in range(1, hours * 60 + 1):
        t = T0 + minute * MIN
        for uid, (space, name, created, mig) in list(pods.items())[-3:]:
            book.apply("MODIFIED", pod_object(space, name, uid, "n1", created, 1, "Running", mig_profile=mig), t)
        uid = rng.choice(list(pods)[: live // 2])
        space, name, created, mig = pods.pop(uid)
        if rng.random() < 0.5:
            book.apply("MODIFIED", pod_object(space, name, uid, "n1", created, 1, "Succeeded", mig_profile=mig), t)
            gc.append((t + 20 * MIN, space, name, uid, created, mig))
        else:
            book.apply("DELETED", pod_object(space, name, uid, "n1", created, 1, "Running", mig_profile=mig), t)
        while gc and gc[0][0] <= t:
            _, space, name, uid, created, mig = gc.pop(0)
            book.apply("DELETED", pod_object(space, name, uid, "n1", created, 1, "Succeeded", mig_profile=mig), t)
        start(t, name if rng.random() < 0.5 else None)  # the same name with a new UID, or a new name
        if minute % 90 == 0:
            for name, v in ns.items():
                v[2] = rng.choice("abcd")
                book.apply("MODIFIED", namespace_object(name, *v), t)
        if minute % 240 == 0:
            name = names[minute // 240 % len(names)]
            book.apply("DELETED", namespace_object(name, *ns[name]), t)
            ns[name] = [f"{name}-{minute}", t, "a"]
            book.apply("ADDED", namespace_object(name, *ns[name]), t)
        if minute % 60 == 0:
            closed_demand(book, "c", t, done)
            if prune:
                book.prune(t - horizon)
                prune_done(done, book)
    return book, done


def _size(book: OwnershipBook) -> tuple[int, int, int]:
    return len(book.pods), len(orjson.dumps(book.to_state())), sum(map(len, book.namespaces.values()))


def test_a_pruned_book_holds_what_is_live_not_what_was_seen():
    (day, day_done), (six, six_done) = _churn(24, prune=True), _churn(6, prune=True)
    for a, b in zip(_size(day), _size(six), strict=True):
        assert a <= 1.2 * b, (_size(day), _size(six))
    assert len(day_done) <= 1.2 * len(six_done) + 5
    (day_all, day_all_done), (six_all, _) = _churn(24, prune=False), _churn(6, prune=False)
    assert _size(day_all)[0] > 3 * _size(six_all)[0] and _size(day_all)[1] > 3 * _size(six_all)[1]
    assert len(day_all_done) > 3 * len(six_done)
    assert _size(day)[0] < _size(day_all)[0] / 10


def test_pruning_changes_none_of_the_churned_days_lookups_after_the_horizon():
    full, _ = _churn(8, prune=False)
    pruned = copy.deepcopy(full)
    p = T0 + 7 * HOUR
    pruned.prune(p)
    rng = random.Random(3)
    names = {k.split("/", 1)[0] for k in full.pods_by_name}
    pod_names = [tuple(k.split("/", 1)) for k in full.pods_by_name]
    for t in sorted({p, *(e for e in _edges(full) if e >= p), *(rng.randint(p, p + 2 * HOUR) for _ in range(50))}):
        assert [pruned.pod_at(a, b, t) for a, b in pod_names] == [full.pod_at(a, b, t) for a, b in pod_names]
        assert [pruned.namespace_at(n, t) for n in names] == [full.namespace_at(n, t) for n in names]
        assert [pruned.namespace_changes(n, p, t + 1) for n in names] == [
            full.namespace_changes(n, p, t + 1) for n in names]
