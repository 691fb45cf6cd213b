"""A scrape's utilization facts on exclusive GPUs in C (domain/_samples.c ``exclusive_facts``)
against the Python path it stands in for (domain/samples.py ``_emit_sample``, one sample at a
time): the same facts in the same order, the same counts and the same errors, over generated
scrapes that vary what the engine sees (pieces ending, starting and missing under a sample,
GPUs retired and re-entered, MIG and time-sliced GPUs beside exclusive ones, per-pod series,
snapshot gaps) and over values of types the attribution path never hands over."""

from __future__ import annotations

import random
from dataclasses import astuple, replace

import pytest

from gpuledger.domain import _samples, samples
from gpuledger.domain.attribution import Counters
from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import DeviceSample, row_of
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.inventory import GpuEntry, Inventory, MigDevice
from gpuledger.domain.samples import SampleAttribution
from gpuledger.domain.segments import NodeState

T0 = 1_764_000_000_000
GAP = "no PodResources evidence (snapshot gap)"


class Host(SampleAttribution):
    """What ``SampleAttribution`` reads of the attributor it is mixed into."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.cluster_id = "cluster-1"
        self._util_out: list = []
        self.counters = Counters()


def _outcome(run) -> tuple:
    try:
        facts, counts = run()
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        return ("raises", type(exc).__name__, str(exc))
    return ("built", [(type(f), repr(vars(f))) for f in facts], counts)


def python_path(inv: Inventory, st: NodeState, t: int, end: int, scrape, pos: SourcePos):
    host = Host(inv)
    for s in scrape:
        host._emit_sample("node-1", st, t, end, s, pos, "")
    return host._util_out, (host.counters.samples_attributed, host.counters.samples_unattributed)


def c_path(inv: Inventory, st: NodeState, t: int, end: int, scrape, pos: SourcePos, handed: list | None = None):
    """The C path; the samples it hands to the Python one are appended to ``handed``."""
    host = Host(inv)
    gap = GAP if st.gaps and any(a <= t < b for a, b in st.gaps) else ""

    def fallback(s):
        if handed is not None:
            handed.append(s)
        host._emit_sample("node-1", st, t, end, s, pos, "")
    counts = _samples.exclusive_facts(host.cluster_id, "node-1", t, end, scrape, pos, gap, st.pieces, inv.by_uuid(),
                                      host._util_out, fallback)
    c = host.counters
    return host._util_out, (c.samples_attributed + counts[0], c.samples_unattributed + counts[1])


def _piece(rng: random.Random, start: int, end: int, uid: str) -> Piece:
    kind = rng.choice(["allocated", "allocated", "allocated", "unallocated", "unavailable", "over_allocated"])
    return Piece(start, end, f"{rng.getrandbits(64):032x}", kind, rng.choice(["acme", ""]), rng.choice(["p1", ""]),
                 "ns", f"pod-{uid}", rng.choice([f"uid-{uid}", ""]),
                 rng.choice(["high", "high", "medium", "modeled", "unattributed"]), rng.choice(["", "node cordoned"]))


def _pieces(rng: random.Random, t: int) -> list[Piece]:
    """Sorted, not overlapping, with holes: some end or start inside the sample at ``t``."""
    out, at = [], t - rng.choice([0, 1, 5_000, 60_000, 600_000])
    for i in range(rng.choice([0, 1, 1, 2, 3, 5, 8])):
        at += rng.choice([0, 0, 1, 2_500, 7_000])
        length = rng.choice([1, 2_500, 5_000, 9_999, 10_000, 60_000, 3_600_000])
        out.append(_piece(rng, at, at + length, str(i)))
        at += length
    return out


def _case(rng: random.Random):
    uuids = [f"GPU-{i:04x}" for i in range(6)]
    t = T0 + rng.choice([0, 10_000, 3_599_999])
    end = t + rng.choice([10_000, 10_000, 1, 30_000])
    entries, pieces = [], {}
    for u in uuids:
        mode = rng.choice(["exclusive"] * 5 + ["mig", "timeslice", "vgpu-host"])
        if rng.random() < 0.15:  # retired before the sample, back under another mode after it
            entries.append(GpuEntry(u, "node-1", "H100", "H100-80GB", "exclusive", T0 - 10**9, t))
            entries.append(GpuEntry(u, "node-1", "H100", "H100-80GB", mode, t, None))
        elif rng.random() < 0.1:  # not yet in the inventory
            entries.append(GpuEntry(u, "node-1", "H100", "H100-80GB", mode, t + 1, None))
        elif rng.random() > 0.05:  # else: never in it
            entries.append(GpuEntry(u, "node-1", "H100", "H100-80GB", mode, T0 - 10**9,
                                    rng.choice([None, t + 5_000, t + 10**9]), 2 if mode == "timeslice" else 1,
                                    (MigDevice(f"MIG-{u}", "1g.10gb", 3, 0),) if mode == "mig" else ()))
        for device in (u, f"MIG-{u}", f"{u}::0", f"{u}::1"):
            if rng.random() < 0.85:
                pieces[device] = _pieces(rng, t)
    st = NodeState()
    st.pieces = pieces
    if rng.random() < 0.2:
        st.gaps = [[t - 5_000, t + 5_000]] if rng.random() < 0.5 else [[t + 1, t + 20_000]]
    scrape = []
    for u in uuids + ["GPU-unknown"]:
        per_pod = ((("ns", "pod-0"), 0.4),) if rng.random() < 0.1 else ()
        per_pod = tuple((ns, pod, v) for (ns, pod), v in per_pod)
        scrape.append(DeviceSample(u, rng.choice([None, None, 3]), rng.choice([None, 0.0, 0.5, 1.0]),
                                   rng.choice([None, 2**40]), rng.choice([None, 312.5]), rng.choice([None, 1.0e9]),
                                   "H100", per_pod))
    rng.shuffle(scrape)
    return Inventory(gpus=entries), st, t, end, scrape, SourcePos("dcgm", rng.randrange(4), rng.randrange(10**6))


def test_the_domain_uses_the_built_one() -> None:
    assert samples.exclusive_facts is _samples.exclusive_facts


def test_generated_scrapes_agree() -> None:
    rng = random.Random(13)
    samples_seen, handed, seen = 0, [], set()
    for _ in range(1500):
        inv, st, t, end, scrape, pos = _case(rng)
        py = _outcome(lambda: python_path(inv, st, t, end, scrape, pos))  # noqa: B023
        c = _outcome(lambda: c_path(inv, st, t, end, scrape, pos, handed))  # noqa: B023
        assert c == py, (t, end, scrape)
        assert py[0] == "built" and py[1], "every scrape gives facts"
        samples_seen += len(scrape)
        for f in python_path(inv, st, t, end, scrape, pos)[0]:
            seen.add((f.kind, f.confidence, f.reason[:14], f.span_ms < end - t))
    # what the cases reach: the C path takes most samples and hands the rest on; split samples,
    # pieces of every kind, no piece, gap reasons; MIG parents, time slices and unknown GPUs handed on
    assert 0.2 * samples_seen < len(handed) < 0.6 * samples_seen, (len(handed), samples_seen)
    assert {s.gpu_uuid for s in handed} >= {"GPU-unknown"} and any(s.per_pod for s in handed)
    assert {("allocated", "high", "", True), ("allocated", "high", "", False), ("unknown", "unattributed",
            "no capacity fa", False), ("unknown", "unattributed", GAP[:14], False), ("unallocated", "unattributed",
            "device unalloc", False), ("unknown", "unattributed", "MIG parent GPU", False)} <= seen, seen


def test_the_counts_are_of_each_samples_first_fact() -> None:
    inv = Inventory(gpus=[GpuEntry("GPU-a", "node-1", "H100", "H100-80GB", "exclusive", 0, None)])
    st = NodeState()
    rng = random.Random(1)
    held = replace(_piece(rng, T0 - 5_000, T0 + 4_000, "a"), kind="allocated", confidence="high")
    idle = replace(_piece(rng, T0 + 4_000, T0 + 20_000, "b"), kind="unallocated", confidence="unattributed")
    st.pieces = {"GPU-a": [held, idle]}
    s = DeviceSample("GPU-a", None, 0.5, 1, 100.0, 1.0, "H100", ())
    facts, counts = c_path(inv, st, T0, T0 + 10_000, [s], SourcePos("dcgm", 0, 7))
    assert [(f.span_ms, f.kind) for f in facts] == [(4_000, "allocated"), (6_000, "unallocated")]
    assert counts == (1, 0)
    assert (facts, counts) == python_path(inv, st, T0, T0 + 10_000, [s], SourcePos("dcgm", 0, 7))


class Shaped(Piece):
    pass


@pytest.mark.parametrize("spoil", [
    "piece subclass", "float start", "bool end", "huge start", "entries a tuple", "mode a str subclass",
    "valid_from a float", "sample subclass", "pieces a tuple", "t huge", "many pieces", "per_pod list",
])
def test_values_the_path_never_hands_over_are_the_references(spoil: str) -> None:
    """Each is handed to the Python path (or refused by both with the same error)."""
    rng = random.Random(5)
    entry = GpuEntry("GPU-a", "node-1", "H100", "H100-80GB", "exclusive", 0, None)
    pieces = [replace(_piece(rng, T0 - 5_000, T0 + 5_000, "a"), kind="allocated", confidence="high"),
              replace(_piece(rng, T0 + 5_000, T0 + 50_000, "b"), kind="allocated", confidence="high")]
    s = DeviceSample("GPU-a", None, 0.5, 1, 100.0, 1.0, "H100", ())
    t, end = T0, T0 + 10_000
    inv = Inventory(gpus=[entry])
    if spoil == "piece subclass":
        pieces[1] = Shaped(*astuple(pieces[1]))
    elif spoil == "float start":
        pieces[1] = replace(pieces[1], start_ms=T0 + 5_000.0)
    elif spoil == "bool end":
        pieces[0] = replace(pieces[0], start_ms=False, end_ms=True)
    elif spoil == "huge start":
        pieces[1] = replace(pieces[1], start_ms=2**70, end_ms=2**71)
    elif spoil == "mode a str subclass":
        inv = Inventory(gpus=[replace(entry, mode=type("Mode", (str,), {})("exclusive"))])
    elif spoil == "valid_from a float":
        inv = Inventory(gpus=[replace(entry, valid_from_ms=0.0)])
    elif spoil == "sample subclass":
        s = type("Sample", (DeviceSample,), {})(*row_of(s))
    elif spoil == "t huge":
        t, end = 2**64, 2**64 + 10_000
    elif spoil == "many pieces":
        pieces = [replace(pieces[0], start_ms=T0 + i * 100, end_ms=T0 + i * 100 + 100) for i in range(100)]
    elif spoil == "per_pod list":
        s = replace(s, per_pod=[("ns", "pod-a", 0.5)])
    st = NodeState()
    st.pieces = {"GPU-a": tuple(pieces) if spoil == "pieces a tuple" else pieces}
    if spoil == "entries a tuple":
        inv.by_uuid()["GPU-a"] = tuple(inv.by_uuid()["GPU-a"])
    pos = SourcePos("dcgm", 0, 1)
    py = _outcome(lambda: python_path(inv, st, t, end, [s], pos))
    c = _outcome(lambda: c_path(inv, st, t, end, [s], pos))
    assert c == py
    if spoil == "many pieces":
        assert len(py[1]) == 100


def test_arguments_of_the_wrong_kind_are_refused() -> None:
    inv = Inventory(gpus=[])
    with pytest.raises(TypeError, match="11 or 12 arguments"):
        _samples.exclusive_facts("c", "n", T0)
    with pytest.raises(TypeError, match="t and end ints"):
        _samples.exclusive_facts("c", "n", float(T0), T0 + 1, [], SourcePos("d", 0, 0), "", {}, inv.by_uuid(), [],
                                 print)
    with pytest.raises(TypeError, match="must be a sequence"):
        _samples.exclusive_facts("c", "n", T0, T0 + 1, 7, SourcePos("d", 0, 0), "", {}, inv.by_uuid(), [], print)


def test_an_error_in_the_fallback_is_raised() -> None:
    inv = Inventory(gpus=[GpuEntry("GPU-a", "node-1", "H100", "H100-80GB", "mig", 0, None)])
    s = DeviceSample("GPU-a", None, 0.5, 1, 100.0, 1.0, "H100", ())

    def fail(_s):
        raise LookupError("from the fallback")
    with pytest.raises(LookupError, match="from the fallback"):
        _samples.exclusive_facts("c", "n", T0, T0 + 1, [s], SourcePos("d", 0, 0), "", {}, inv.by_uuid(), [], fail)
