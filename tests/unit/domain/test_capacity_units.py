"""Capacity units per sharing mode, straight from the pure functions."""

import pytest

from gpuledger.domain.capacity import segment_facts
from gpuledger.domain.facts import SourcePos
from gpuledger.domain.inventory import InventoryError, parse_inventory
from gpuledger.domain.k8s import OwnershipBook
from gpuledger.domain.timeutil import parse_rfc3339_ms

POS = SourcePos("t", 0, 0)
T0 = parse_rfc3339_ms("2026-10-01T00:00:00Z")


def _inventory(mig_devices, weights=None):
    return parse_inventory({"gpus": [{"gpu_uuid": "GPU-p", "node": "n", "gpu_class": "H100-80GB", "mode": "mig",
                                      "valid_from": "2026-10-01T00:00:00Z", "mig_devices": mig_devices}],
                            "mig_profile_weights": weights or {}})


def _mig(uuid, profile, gi):
    return {"mig_uuid": uuid, "profile": profile, "gpu_instance_id": gi}


def test_mig_over_allocation_is_flagged_not_clipped():
    inv = _inventory([_mig("MIG-a", "4g.40gb", 1), _mig("MIG-b", "4g.40gb", 2)])
    facts = [f for _, f, _ in segment_facts(inv, OwnershipBook(), "c", "n", T0, T0 + 3_600_000, {}, POS)]
    by_kind = {}
    for f in facts:
        by_kind.setdefault(f.kind, []).append(f)
    assert sorted(f.capacity_fraction for f in by_kind["unallocated"]) == pytest.approx([4 / 7, 4 / 7])
    (flag,) = by_kind["over_allocated"]
    assert flag.capacity_fraction == pytest.approx(1 / 7) and "over-allocated" in flag.reason


def test_mig_capacity_in_no_instance_is_fragmentation():
    inv = _inventory([_mig("MIG-a", "3g.40gb", 1)])
    facts = [f for _, f, _ in segment_facts(inv, OwnershipBook(), "c", "n", T0, T0 + 3_600_000, {}, POS)]
    rest = [f for f in facts if f.device_id == "GPU-p/unpartitioned"]
    assert len(rest) == 1 and rest[0].capacity_fraction == pytest.approx(4 / 7)
    assert sum(f.capacity_fraction for f in facts) == pytest.approx(1.0, abs=1e-12)


def test_inventory_weights_override_the_default():
    inv = _inventory([_mig("MIG-a", "1g.10gb", 1)], {"H100-80GB": {"1g.10gb": 0.125}})
    assert inv.mig_weight("H100-80GB", "1g.10gb") == 0.125
    assert inv.mig_weight("H100-80GB", "2g.20gb") == pytest.approx(2 / 7)


def test_bad_profile_names_the_entry():
    with pytest.raises(InventoryError, match=r"gpus\[0\].*'big'"):
        _inventory([_mig("MIG-a", "big", 1)])


def test_optional_inventory_fields_may_be_null():
    from gpuledger.domain.inventory import parse_inventory

    inv = parse_inventory({"gpus": [
        {"gpu_uuid": "GPU-a", "node": "n", "model": None, "gpu_class": "H100-80GB", "mode": None,
         "valid_from": "2026-10-01T00:00:00Z", "valid_to": None},
        {"gpu_uuid": "GPU-b", "node": "n", "model": "NVIDIA H100", "gpu_class": None, "mode": "mig",
         "valid_from": "2026-10-01T00:00:00Z",
         "mig_devices": [{"mig_uuid": "MIG-b1", "profile": "3g.40gb", "gpu_instance_id": 1, "compute_instance_id": None}]}],
        "unavailable": [{"gpu_uuid": "GPU-a", "from": "2026-10-02T00:00:00Z", "to": "2026-10-02T01:00:00Z",
                         "reason": None}], "mig_profile_weights": None, "vgpu_profile_weights": None})
    a, b = inv.gpus
    assert (a.model, a.mode, b.gpu_class) == ("", "exclusive", "NVIDIA H100")
    assert b.mig_devices[0].compute_instance_id == 0 and inv.unavailable[0].reason == ""
