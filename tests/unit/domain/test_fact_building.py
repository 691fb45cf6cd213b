"""Facts built on the per-sample path (``domain.facts.built``, no dataclass ``__init__``) are
exactly the facts ``__init__`` builds: every field present in the fields' order, nothing else,
the same values, for every sharing mode, vGPU, outside-inventory and unattributed case the
sharing plan holds, and for the health facts of its scrapes."""

import dataclasses

from gpuledger.demo.cluster import write_capture
from gpuledger.demo.builder import GpuSpec, dcgm_exposition
from gpuledger.domain.dcgm import DcgmParse, parse_exposition
from gpuledger.domain.facts import CapacityFact, SourcePos, UtilizationFact, source_pos
from gpuledger.domain.gpu_health import GpuHealthFact
from pipeline import run_capture
from plans import sharing_plan


def test_facts_built_without_init_equal_those_built_with_it(tmp_path):
    mp, _ = run_capture(write_capture(sharing_plan(), tmp_path / "cap"))
    for cls, table in ((CapacityFact, mp.store.capacity), (UtilizationFact, mp.store.utilization)):
        names = [f.name for f in dataclasses.fields(cls)]
        kinds = {(f.kind, f.confidence) for f in table.values()}
        assert len(table) > 100 and len(kinds) >= 3, (cls.__name__, kinds)  # many facts of several kinds
        for fact in table.values():
            assert type(fact) is cls and sorted(vars(fact)) == sorted(names), fact
            assert cls(**{n: getattr(fact, n) for n in names}) == fact
            assert hash(fact.fact_id) and dataclasses.replace(fact, src_offset=0).fact_id == fact.fact_id
    names = [f.name for f in dataclasses.fields(GpuHealthFact)]
    assert len(mp.store.health) > 100
    assert len({(f.gpu_uuid, f.gpu_instance_id) for f in mp.store.health.values()}) >= 5  # whole GPUs and MIG instances
    for fact in mp.store.health.values():
        assert type(fact) is GpuHealthFact and list(vars(fact)) == names, fact
        assert GpuHealthFact(**{n: getattr(fact, n) for n in names}) == fact


def test_a_source_position_and_a_parse_built_without_init_equal_those_built_with_it():
    pos = source_pos("gpuledger.source.dcgm", 3, 17)
    assert type(pos) is SourcePos and pos == SourcePos("gpuledger.source.dcgm", 3, 17)
    assert list(vars(pos)) == [f.name for f in dataclasses.fields(SourcePos)] and hash(pos) == hash(SourcePos(
        "gpuledger.source.dcgm", 3, 17))
    text = dcgm_exposition("node-1", [(GpuSpec("GPU-1", "node-1", 0), 0.5, {"pod": "job", "namespace": "team-a"})])
    parsed = parse_exposition(text)
    names = [f.name for f in dataclasses.fields(DcgmParse)]
    assert type(parsed) is DcgmParse and list(vars(parsed)) == names and parsed.samples
    assert DcgmParse(**{n: getattr(parsed, n) for n in names}) == parsed


def test_built_in_c_is_the_reference():
    """``built`` in C adopts the dict as the reference does (the same dict, so the same fields in
    the same order, nothing copied), an empty one too; it sets a slotted class's fields in its
    slots, which the reference cannot; anything but a class and a dict is refused."""
    import pytest

    from gpuledger.domain import facts
    from gpuledger.domain.facts import python_built

    assert facts.built is not python_built  # (make setup builds the C modules)
    for build in (facts.built, python_built):
        d = {"topic": "t", "partition": 1, "offset": 2}
        pos = build(SourcePos, d)
        assert type(pos) is SourcePos and vars(pos) is d and pos == SourcePos("t", 1, 2)

        class Bare:
            pass

        empty = {}
        assert vars(build(Bare, empty)) is empty

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: int
        b: str

    s = facts.built(Slotted, {"b": "x", "a": 1})
    assert s == Slotted(1, "x") and not hasattr(s, "__dict__")
    with pytest.raises((TypeError, AttributeError)):
        python_built(Slotted, {"a": 1, "b": "x"})
    for bad in ((SourcePos, [("topic", "t")]), ("SourcePos", {}), (SourcePos,)):
        with pytest.raises(TypeError):
            facts.built(*bad)
