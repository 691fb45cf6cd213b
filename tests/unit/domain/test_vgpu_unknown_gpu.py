"""A vGPU whose physical GPU is unknown or not a vGPU host GPU in the inventory is still
counted, as unattributed capacity with the reason that says which."""

from gpuledger.domain.facts import SourcePos
from gpuledger.domain.inventory import parse_inventory
from gpuledger.domain.vgpu import vgpu_holders, vgpu_segment_facts

INV = parse_inventory({"gpus": [{"gpu_uuid": "GPU-a", "node": "host-1", "model": "NVIDIA A100", "gpu_class": "A100",
                                 "valid_from": "2026-10-01T00:00:00Z", "valid_to": None, "mode": "vgpu"}],
                       "vgpu_profile_weights": {"A100-4C": 0.1}})
POS = SourcePos("vgpu", 0, 7)


def _reasons(physical: str) -> list[tuple[str, str, str]]:
    holders = vgpu_holders([{"vgpu_uuid": "vgpu-1", "physical_gpu_uuid": physical, "profile": "A100-4C",
                             "vm_uuid": "vm-1", "vm_name": "vm-one", "tenant_id": "alpha"}])
    out = vgpu_segment_facts(INV, "c1", "host-1", 1_792_000_000_000, 1_792_000_060_000, holders, POS)
    return [(f.device_id, f.confidence, f.reason) for _, f, _ in out if f.device_id == "vgpu-1"]


def test_a_known_gpu_attributes_the_vgpu():
    assert _reasons("GPU-a") == [("vgpu-1", "high", "")]


def test_a_gpu_missing_from_the_inventory_is_named():
    assert _reasons("GPU-z") == [("vgpu-1", "unattributed",
                                  "physical GPU GPU-z is not in the inventory as a vGPU host GPU on host-1")]


def test_an_unknown_gpu_says_the_host_gave_no_uuid():
    assert _reasons("") == [("vgpu-1", "unattributed", "the physical GPU of vGPU vgpu-1 on host-1 is unknown "
                                                         "(nvidia-smi gave no UUID for its bus id)")]
