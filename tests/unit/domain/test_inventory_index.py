"""The inventory's per-node lookups follow the entries in force: worked out once per node, and
again whenever the list of entries is replaced or grows."""

from gpuledger.domain.inventory import GpuEntry, parse_inventory
from gpuledger.domain.timeutil import parse_rfc3339_ms


def _doc(*gpus: tuple[str, str, str | None]) -> dict:
    return {"gpus": [{"gpu_uuid": u, "node": n, "valid_from": "2026-11-01T00:00:00Z", **({"valid_to": e} if e else {})}
                     for u, n, e in gpus]}


def test_node_end_is_the_last_gpu_leaving_and_none_while_one_stays():
    inv = parse_inventory(_doc(("GPU-1", "a", "2026-11-10T00:00:00Z"), ("GPU-2", "a", "2026-11-12T00:00:00Z"),
                               ("GPU-3", "b", "2026-11-10T00:00:00Z"), ("GPU-4", "b", None)))
    for _ in range(2):  # worked out, then answered from the index
        assert inv.node_end_ms("a") == parse_rfc3339_ms("2026-11-12T00:00:00Z")
        assert inv.node_end_ms("b") is None
        assert inv.node_end_ms("c") is None


def test_node_end_follows_the_entries_when_they_change():
    inv = parse_inventory(_doc(("GPU-1", "a", "2026-11-10T00:00:00Z")))
    assert inv.node_end_ms("a") == parse_rfc3339_ms("2026-11-10T00:00:00Z")
    inv.gpus.append(GpuEntry("GPU-2", "a", "H100", "H100", "exclusive", 0, None))  # the list grows
    assert inv.node_end_ms("a") is None
    inv.gpus = [GpuEntry("GPU-2", "a", "H100", "H100", "exclusive", 0, 5_000)]  # the list replaced
    assert inv.node_end_ms("a") == 5_000


def test_units_are_worked_out_once_per_entry_and_again_for_a_new_one():
    from dataclasses import replace

    from gpuledger.domain.units import _units_of, units_of

    inv = parse_inventory(_doc(("GPU-1", "a", None)))
    gpu = inv.gpus[0]
    first = units_of(inv, gpu)
    assert units_of(inv, gpu) is first and first == _units_of(inv, gpu)
    assert [u.device_id for u in first[0]] == ["GPU-1"]
    sliced = replace(gpu, mode="timeslice", timeslice_replicas=3)
    inv.gpus = [sliced]  # the entries replaced: the memo goes with the index
    assert [u.device_id for u in units_of(inv, sliced)[0]] == ["GPU-1::0", "GPU-1::1", "GPU-1::2"]
    assert units_of(inv, gpu) == first  # an entry no longer held is worked out again, not mistaken for another


def test_maintenance_windows_follow_the_list_and_overlap_half_open():
    from gpuledger.domain.inventory import Unavailability

    inv = parse_inventory({**_doc(("GPU-1", "a", None), ("GPU-2", "a", None)), "unavailable": [
        {"gpu_uuid": "GPU-1", "from": "2026-11-02T00:00:00Z", "to": "2026-11-03T00:00:00Z", "reason": "swap"}]})
    day2, day3 = parse_rfc3339_ms("2026-11-02T00:00:00Z"), parse_rfc3339_ms("2026-11-03T00:00:00Z")
    assert [u.reason for u in inv.unavailable_windows("GPU-1", day2 - 1, day2 + 1)] == ["swap"]
    assert inv.unavailable_windows("GPU-1", day3, day3 + 10) == []  # [from, to): the end is not in it
    assert inv.unavailable_windows("GPU-1", day2 - 10, day2) == []
    assert inv.unavailable_windows("GPU-2", day2, day3) == []
    inv.unavailable.append(Unavailability("GPU-2", day2, day3, "reflow"))  # the list grows
    assert [u.reason for u in inv.unavailable_windows("GPU-2", day2, day3)] == ["reflow"]
    inv.unavailable = []  # replaced
    assert inv.unavailable_windows("GPU-1", day2, day3) == []
