"""A node's capacity segment in C (domain/_capacity_segment.c ``segment_facts``) against its
Python reference (domain/capacity.py ``python_segment_facts``): the same (device id, fact,
piece) list, field by field and in order, or the same error, over generated nodes (exclusive,
MIG and time-sliced GPUs, entries retired or added inside the segment, maintenance windows,
pods replaced under one name, ending inside or before the segment, namespaces relabelled
inside it, unknown or without a tenant, devices held outside the inventory, hostile strings
and malformed holders), and the reference's answer for arguments the path never makes."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from gpuledger.domain import _facts, attribution, capacity
from gpuledger.domain.capacity import python_segment_facts
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.inventory import GpuEntry, Inventory, MigDevice, Unavailability
from gpuledger.domain.k8s import NamespaceVersion, OwnershipBook, PodLife

T0 = 1_790_000_000_000
START, END = T0 + 600_000, T0 + 660_000
POS = SourcePos("podresources", 3, 41)
NAMESPACES = ["team-a", "team-b", "ns/é", "\x1f", "gone"]


def _outcome(build, args) -> tuple:
    try:
        items = build(*args)
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    return ("built", [(device, type(fact), list(vars(fact).items()), type(piece), _slots(piece))
                      for device, fact, piece in items])


def _slots(piece) -> tuple:
    """A piece's fields in its dataclass's order, and its __dict__ where it has one (a Piece keeps
    its fields in slots)."""
    return [(f.name, getattr(piece, f.name)) for f in dataclasses.fields(piece)], getattr(piece, "__dict__", None)


def _instant(rng: random.Random) -> int:
    """Before, at the edges of, inside or after the segment."""
    return rng.choice([T0, START - 1, START, START + 1, START + 30_000, END - 1, END, END + 1, END + 600_000])


def _until(rng: random.Random) -> int | None:
    return None if rng.random() < 0.6 else _instant(rng)


def _inventory(rng: random.Random, gpus: list[str]) -> Inventory:
    inv = Inventory()
    for i, uuid in enumerate(gpus):
        mode = rng.choices(["exclusive", "mig", "timeslice", "vgpu"], [8, 1, 1, 1])[0]
        frm = T0 if rng.random() < 0.8 else _instant(rng)
        to = None if rng.random() < 0.8 else max(frm + 1, _instant(rng))
        migs = (MigDevice(f"MIG-{uuid}-0", rng.choice(["3g.40gb", "4g.40gb"]), 1, 0),
                MigDevice(f"MIG-{uuid}-1", "4g.40gb", 2, 0)) if mode == "mig" else ()  # 7/7 or 8/7 of a GPU
        inv.gpus.append(GpuEntry(uuid, "node-1", "H100", rng.choice(["H100-80GB", "é"]), mode, frm, to,
                                 rng.choice([2, 3]) if mode == "timeslice" else 1, migs))
        if rng.random() < 0.1:  # a later entry of the same GPU (re-partitioned, or back in service)
            inv.gpus.append(GpuEntry(uuid, "node-1", "H100", "H100-80GB", "exclusive", to or END - 5_000, None))
        if i == 0 and rng.random() < 0.2:
            inv.gpus.append(GpuEntry("GPU-elsewhere", "node-2", "H100", "H100-80GB", "exclusive", T0, None))
    for uuid in gpus:
        if rng.random() < 0.15:
            a = _instant(rng)
            inv.unavailable.append(Unavailability(uuid, a, max(a + 1, _instant(rng)), rng.choice(["", "maintenance"])))
    return inv


def _book(rng: random.Random) -> OwnershipBook:
    book = OwnershipBook()
    for ns in NAMESPACES:
        if ns == "gone" or rng.random() < 0.1:
            continue  # a namespace the book never saw
        edges = sorted({T0 - 1_000, *(_instant(rng) for _ in range(rng.choice([0, 0, 0, 1, 2])))})
        for k, frm in enumerate(edges):
            to = edges[k + 1] if k + 1 < len(edges) else (None if rng.random() < 0.9 else _instant(rng))
            tenant = rng.choice(["acme", "acme", "", "t\x1f"])
            book.namespaces.setdefault(ns, []).append(
                NamespaceVersion(f"uid-{ns}", ns, frm, to, tenant, rng.choice(["", "p1"]), rng.choice(["", "cc"])))
        if ns in book.namespaces and rng.random() < 0.2:  # recreated at the same instant: the first one wins
            book.namespaces[ns].append(NamespaceVersion(f"uid2-{ns}", ns, edges[0], None, "other", "p2", ""))
    for i in range(12):
        ns, name = rng.choice(NAMESPACES), f"pod-{i % 8}"
        start = T0 if rng.random() < 0.7 else _instant(rng)
        end = None if rng.random() < 0.7 else max(start, _instant(rng))
        uid = f"uid-pod-{i}"
        book.pods[uid] = PodLife(uid, ns, name, "node-1", start, end, rng.choice(["", "ep-1"]))
        book.pods_by_name.setdefault(f"{ns}/{name}", []).append(uid)
    return book


def _holder(rng: random.Random):
    roll = rng.random()
    if roll < 0.04:
        return ["team-a", "pod-1", "c", "nvidia.com/gpu"]  # a list: the reference's
    if roll < 0.07:
        return ("team-a", "pod-1")  # too short: the reference's error
    if roll < 0.1:
        return (7, "pod-1", "c", "r")  # a namespace that is not a str
    return (rng.choice(NAMESPACES), f"pod-{rng.randrange(9)}", rng.choice(["main", ""]), "nvidia.com/gpu")


def _args(rng: random.Random) -> tuple:
    gpus = [f"GPU-{k:04d}" for k in range(rng.randrange(1, 9))]
    inv = _inventory(rng, gpus)
    devices = [u.device_id for g in inv.on_node("node-1") for u in capacity.units_of(inv, g)[0]]
    holders = {d: _holder(rng) for d in devices if rng.random() < 0.7}
    for extra in ("GPU-outside", "MIG-outside", "not-a-gpu", "GPU-elsewhere"):
        if rng.random() < 0.1:
            holders[extra] = _holder(rng)
    start, end = START, END
    if rng.random() < 0.05:
        start, end = 2**70, 2**70 + 60_000  # past 64 bits: the reference's
    return inv, _book(rng), rng.choice(["c1", "c\x1f2"]), "node-1", start, end, holders, POS


def test_the_domain_uses_the_built_one() -> None:
    assert capacity.segment_facts is _facts.segment_facts
    assert attribution.segment_facts is _facts.segment_facts


def test_generated_nodes_agree() -> None:
    rng = random.Random(29)
    decided: Counter = Counter()
    taken0, handed0 = _facts.segment_counts()
    for _ in range(4000):
        args = _args(rng)
        c, py = _outcome(_facts.segment_facts, args), _outcome(python_segment_facts, args)
        assert c == py, args
        if c[0] == "raises":
            decided["raises", c[1]] += 1
        for _device, _cls, fields, _pcls, _piece in c[1] if c[0] == "built" else ():
            fact = dict(fields)
            decided[fact["kind"], fact["confidence"]] += 1
    taken, handed = (n - n0 for n, n0 in zip(_facts.segment_counts(), (taken0, handed0)))
    assert taken > 10_000 and handed > 2_000, (taken, handed)  # both paths are exercised, the C one most
    for seen in [("unallocated", ""), ("allocated", "high"), ("allocated", "unattributed"), ("unavailable", ""),
                 ("outside_inventory", "unattributed"), ("over_allocated", ""), ("allocated", "modeled"),
                 ("raises", "IndexError")]:
        assert decided[seen] > 20, (seen, decided)


def test_each_decision_of_an_exclusive_gpu_is_made_in_c() -> None:
    """Each outcome of one exclusive GPU over an unchanging segment, taken in C (not handed); the
    GPU enters the inventory inside the segment, so a pod can hold it at the start and end first."""
    inv = Inventory([GpuEntry("GPU-1", "node-1", "H100", "H100-80GB", "exclusive", START + 10_000, None)])
    book = OwnershipBook()
    book.namespaces["team-a"] = [NamespaceVersion("ns-uid", "team-a", T0, None, "acme", "p1", "cc")]
    book.namespaces["bare"] = [NamespaceVersion("ns-uid-2", "bare", T0, None, "", "", "")]
    book.namespaces["relabelled"] = [NamespaceVersion("ns-uid-3", "relabelled", T0, START + 10_000, "old", "", ""),
                                     NamespaceVersion("ns-uid-3", "relabelled", START + 10_000, END, "acme", "", ""),
                                     NamespaceVersion("ns-uid-3", "relabelled", END, None, "later", "", "")]
    for uid, ns, name, end in [("u1", "team-a", "live", None), ("u2", "team-a", "done", START + 5_000),
                               ("u3", "nowhere", "orphan", None), ("u4", "bare", "untenanted", None),
                               ("u5", "relabelled", "moved", None)]:
        book.pods[uid] = PodLife(uid, ns, name, "node-1", T0, end)
        book.pods_by_name[f"{ns}/{name}"] = [uid]
    expected = {None: ("unallocated", ""), ("team-a", "live"): ("allocated", ""),
                ("team-a", "done"): ("unallocated", "holding pod had ended"),
                ("team-a", "missing"): ("allocated", "no pod team-a/missing known at the snapshot time"),
                ("nowhere", "orphan"): ("allocated", "namespace nowhere unknown at that time"),
                ("bare", "untenanted"): ("allocated", "namespace bare has no gpuledger.io/tenant label"),
                ("relabelled", "moved"): ("allocated", "")}  # relabelled at the GPU's first and last instants
    for who, (kind, reason) in expected.items():
        holders = {} if who is None else {"GPU-1": (*who, "main", "nvidia.com/gpu")}
        args = (inv, book, "c1", "node-1", START, END, holders, POS)
        before = _facts.segment_counts()
        got = _facts.segment_facts(*args)
        after = _facts.segment_counts()
        assert (after[0] - before[0], after[1] - before[1]) == (1, 0), who
        assert _outcome(_facts.segment_facts, args) == _outcome(python_segment_facts, args)
        ((_, fact, _),) = got
        assert (fact.kind, fact.reason) == (kind, reason), who
        assert (fact.tenant_id, fact.confidence) == (("acme", "high") if kind == "allocated" and not reason else
                                                     ("", "unattributed" if kind == "allocated" else "")), who


@pytest.mark.parametrize("spoil", ["holders a dict subclass", "start a bool", "too few arguments", "book without pods",
                                   "a gpu entry without a mode", "pods_by_name holding a tuple",
                                   "a gpu entry valid from None", "a pod started at None"])
def test_arguments_the_path_never_makes_are_the_references(spoil: str) -> None:
    args = list(_args(random.Random(5)))
    args[6] = {"GPU-0000": ("team-a", "pod-1", "c", "r")}
    if spoil == "holders a dict subclass":
        args[6] = type("Holders", (dict,), {})(args[6])
    elif spoil == "start a bool":
        args[4] = True
    elif spoil == "too few arguments":
        args = args[:7]
    elif spoil == "book without pods":
        args[1] = type("Book", (), {"pods_by_name": {}, "namespaces": {}})()
    elif spoil == "a gpu entry without a mode":
        args[0] = Inventory([type("Entry", (), {"gpu_uuid": "GPU-0000", "valid_from_ms": T0, "valid_to_ms": None})()])
    elif spoil == "pods_by_name holding a tuple":
        args[1].pods_by_name["team-a/pod-1"] = tuple(args[1].pods_by_name.get("team-a/pod-1", ()))
    elif spoil == "a gpu entry valid from None":  # a bound only the end may leave open: both raise
        args[0] = Inventory([GpuEntry("GPU-0000", "node-1", "H100", "H100-80GB", "exclusive", None, None)])
    elif spoil == "a pod started at None":
        args[0] = Inventory([GpuEntry("GPU-0000", "node-1", "H100", "H100-80GB", "exclusive", T0, None)])
        args[1] = OwnershipBook(pods={"u1": PodLife("u1", "team-a", "pod-1", "node-1", None)},
                                pods_by_name={"team-a/pod-1": ["u1"]})
    outcome = _outcome(_facts.segment_facts, args)
    assert outcome == _outcome(python_segment_facts, args)
    if "None" in spoil:
        assert outcome[:2] == ("raises", "TypeError"), outcome


def _same_outcome(build, args) -> tuple:
    try:
        return ("answered", build(*args))
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))


def test_same_pods_agrees_on_generated_books() -> None:
    """Whether every holder names the same pod at a segment's start and at the next one's, as
    ``python_same_pods`` answers (pods replaced under one name, ended, starting between the two
    instants, names no pod bore, lives alike but for their UIDs, malformed holders)."""
    rng = random.Random(31)
    answers: Counter = Counter()
    for _ in range(4000):
        book = _book(rng)
        if rng.random() < 0.1:  # a name borne by two lives alike but for their UIDs
            life = next(iter(book.pods.values()))
            twin = PodLife(**vars(life))
            twin.uid = life.uid + "-twin"
            book.pods[twin.uid] = twin
            book.pods_by_name[f"{life.namespace}/{life.name}"].append(twin.uid)
        lives = list(book.pods.values())
        holders = {f"GPU-{k}": (life.namespace, life.name, "main", "nvidia.com/gpu") if rng.random() < 0.6
                   else _holder(rng) for k, life in enumerate(rng.sample(lives, rng.randrange(0, 5)))}
        a, b = sorted((_instant(rng), _instant(rng)))
        args = (book, holders, a, b)
        c, py = _same_outcome(_facts.same_pods, args), _same_outcome(capacity.python_same_pods, args)
        assert c == py, args
        answers[c[:2]] += 1
    assert answers["answered", True] > 500 and answers["answered", False] > 500, answers
    assert capacity.same_pods is _facts.same_pods


def test_same_pods_of_arguments_the_path_never_makes_are_the_references() -> None:
    book = _book(random.Random(8))
    for args in [(book, type("Holders", (dict,), {})(), START, END), (book, {}, True, END), (book, {}, START),
                 (book, {"GPU-1": ("team-a", "pod-1")}, 2**70, END), (object(), {"GPU-1": ("a", "b")}, START, END),
                 (book, {"GPU-1": "team-a/pod-1"}, START, END), (book, {"GPU-1": ("team-a",)}, START, END)]:
        assert _same_outcome(_facts.same_pods, args) == _same_outcome(capacity.python_same_pods, args), args
