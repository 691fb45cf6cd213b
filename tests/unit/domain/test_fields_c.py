"""The C modules read a sample's, a piece's and a source position's fields from the object's
__dict__ (domain/_fields.h) only where that is what attribute access answers: a class with a
property of a field's name, a class given one after its objects were read the fast way (and
rid of it again), and a field only the class holds are read as Python reads them."""

from __future__ import annotations

from gpuledger.domain import _facts
from gpuledger.domain.capacity import Piece
from gpuledger.domain.dcgm import DeviceSample
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.inventory import GpuEntry
from gpuledger.domain.samples import exclusive_facts
from gpuledger.domain.utilization import python_utilization_fact

T0 = 1_764_000_000_000
PIECE = Piece(T0 - 60_000, T0 + 60_000, "f" * 32, "allocated", "acme", "p1", "ns", "pod-a", "uid-a", "high", "")


class Sample:
    """A sample of no dataclass: its fields are what its __dict__ holds."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def _fields(**change) -> dict:
    return {"gpu_uuid": "GPU-a", "gpu_instance_id": None, "sm_active_ratio": 0.5, "fb_used_bytes": 2**30,
            "power_w": 300.0, "energy_j": 1e9, "model": "H100", "per_pod": (), **change}


def _args(sample, piece=PIECE, pos=SourcePos("dcgm", 1, 7)) -> tuple:
    return ("c1", "node-1", T0, sample, pos, "GPU-a", T0, T0 + 10_000, piece, "", {}, {}, 1)


def _both(args: tuple) -> tuple[dict, dict]:
    return vars(_facts.utilization_fact(*args)), vars(python_utilization_fact(*args))


def test_a_property_of_the_class_is_read_not_the_dict_entry_of_its_name() -> None:
    class Scaled(Sample):
        sm_active_ratio = property(lambda self: 0.25)

    s = Scaled(**_fields())  # its __dict__ holds 0.5 under the property's name
    c, py = _both(_args(s))
    assert c == py and c["sm_active_ratio"] == 0.25


def test_a_class_changed_after_its_objects_were_read_is_read_anew() -> None:
    class Plain(Sample):
        pass

    s = Plain(**_fields())
    assert _both(_args(s))[0]["power_w"] == 300.0  # read from __dict__, the class checked
    Plain.power_w = property(lambda self: 111.0)
    c, py = _both(_args(s))
    assert c == py and c["power_w"] == 111.0
    del Plain.power_w
    assert _both(_args(s))[0]["power_w"] == 300.0


def test_a_field_only_the_class_holds_is_read_from_the_class() -> None:
    class Defaults(Sample):
        energy_j = 5.0

    fields = _fields()
    del fields["energy_j"]
    c, py = _both(_args(Defaults(**fields)))
    assert c == py and c["energy_j"] == 5.0


def test_the_piece_class_given_a_property_is_read_anew() -> None:
    sample = DeviceSample("GPU-a", None, 0.5, 2**30, 300.0, 1e9, "H100", ())
    assert _facts.utilization_fact(*_args(sample)).tenant_id == "acme"  # the Piece class checked
    slot = Piece.__dict__["tenant_id"]  # (a Piece keeps its fields in slots: put back after)
    Piece.tenant_id = property(lambda self: "from-a-property")
    try:
        c, py = _both(_args(sample))
        assert c == py and c["tenant_id"] == "from-a-property"
    finally:
        Piece.tenant_id = slot
    c, py = _both(_args(sample))
    assert c == py and c["tenant_id"] == "acme"


def test_a_piece_bound_given_a_property_is_the_one_the_samples_meet() -> None:
    sample = DeviceSample("GPU-a", None, 0.5, 2**30, 300.0, 1e9, "H100", ())
    gpus = {"GPU-a": [GpuEntry("GPU-a", "node-1", "H100", "H100", "exclusive", T0 - 10**6, None)]}

    def spans() -> list[int]:
        out: list = []
        exclusive_facts("c1", "node-1", T0, T0 + 10_000, [sample], SourcePos("dcgm", 1, 7), "",
                                 {"GPU-a": [PIECE]}, gpus, out, out.append)
        return [f.span_ms for f in out]

    assert spans() == [10_000]  # the piece covers the whole sample: the Piece class checked
    slot = Piece.__dict__["start_ms"]
    Piece.start_ms = property(lambda self: T0 + 4_000)
    try:
        assert spans() == [6_000]  # the piece begins inside it now
    finally:
        Piece.start_ms = slot
    assert spans() == [10_000]


def _slotted(**change) -> DeviceSample:
    return DeviceSample(**_fields(**change))


def test_a_slotted_sample_is_read_from_its_slots_as_python_reads_it() -> None:
    c, py = _both(_args(_slotted(power_w=123.0)))
    assert c == py and c["power_w"] == 123.0 and c["gpu_uuid"] == "GPU-a"


def test_a_slot_shadowed_by_a_property_of_a_subclass_is_read_through_the_property() -> None:
    class Scaled(DeviceSample):
        sm_active_ratio = property(lambda self: 0.25)

    s = object.__new__(Scaled)
    for name, value in _fields().items():
        if name != "sm_active_ratio":
            object.__setattr__(s, name, value)
    c, py = _both(_args(s))
    assert c == py and c["sm_active_ratio"] == 0.25


def test_a_slot_not_an_instance_dict_entry_of_its_name_is_read() -> None:
    class WithDict(DeviceSample):  # (no __slots__ of its own: its objects have a __dict__ too)
        pass

    s = WithDict(**_fields())
    s.__dict__["power_w"] = 1.0  # a slot is a data descriptor: attribute access answers the slot
    c, py = _both(_args(s))
    assert c == py and c["power_w"] == 300.0


def test_the_sample_class_changed_after_its_samples_were_read_is_read_anew() -> None:
    s = _slotted()
    assert _both(_args(s))[0]["power_w"] == 300.0  # from the slot, the class checked
    slot = DeviceSample.__dict__["power_w"]
    DeviceSample.power_w = property(lambda self: 111.0)
    try:
        c, py = _both(_args(s))
        assert c == py and c["power_w"] == 111.0
    finally:
        DeviceSample.power_w = slot
    assert _both(_args(s))[0]["power_w"] == 300.0


def test_a_slot_never_set_raises_as_python_does() -> None:
    s = object.__new__(DeviceSample)
    for name, value in _fields().items():
        if name != "energy_j":
            object.__setattr__(s, name, value)
    outcomes = []
    for make in (_facts.utilization_fact, python_utilization_fact):
        try:
            make(*_args(s))
            outcomes.append("built")
        except AttributeError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1] and "energy_j" in outcomes[0]
