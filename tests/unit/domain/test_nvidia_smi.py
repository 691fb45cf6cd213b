"""``nvidia-smi vgpu -q`` and ``--query-gpu=pci.bus_id,uuid`` parsing, on the real 525-driver sample
and on a constructed three-A100 host in the same layout."""

from pathlib import Path

import pytest

from gpuledger.domain.nvidia_smi import (NvidiaSmiError, normalize_bus_id, parse_gpu_uuids, parse_vgpu_query,
                                         profile_of, qemu_vm_name)

VGPU = Path(__file__).resolve().parents[2] / "fixtures" / "vgpu"
REAL_Q = (VGPU / "nvidia-smi-vgpu-q-rtx4080-unlocked-525.txt").read_text()
REAL_TABLE = (VGPU / "nvidia-smi-vgpu-rtx4080-unlocked-525.txt").read_text()
A100_Q = (VGPU / "nvidia-smi-vgpu-q-a100x3.constructed.txt").read_text()
A100_CSV = (VGPU / "nvidia-smi-query-gpu-a100x3.constructed.csv").read_text()


def test_real_sample_with_empty_uuids_falls_back_to_mdev_uuid_and_vm_name():
    (r,) = parse_vgpu_query(REAL_Q)
    assert r.bus_id == "00000000:01:00.0" and r.vgpu_id == "3251634190"
    assert r.vgpu_name == "NVIDIA RTXA6000-2Q" and r.profile == "RTXA6000-2Q" and r.vgpu_type == "525"
    assert r.vgpu_uuid == "" and r.mdev_uuid == "00000000-0000-0000-0000-000000000101"
    assert r.vgpu_identity == "00000000-0000-0000-0000-000000000101"
    assert r.vm_uuid == "" and r.vm_name_printed == "win10test,debug-threads=on"
    assert r.vm_name == "win10test" and r.vm_identity == "win10test"
    assert (r.gpu_instance_id, r.fb_total_mib, r.fb_used_mib, r.gpu_util_pct) == (None, 2048, 0, 0)
    assert r.extra["License Status"] == "N/A (Expiry: N/A)" and r.extra["Accounting Buffer Size"] == "4000"


def test_multi_gpu_host_lists_every_vgpu_and_skips_a_gpu_without_any():
    records = parse_vgpu_query(A100_Q)
    assert [(r.bus_id, r.vgpu_id, r.profile) for r in records] == [
        ("00000000:17:00.0", "3251634213", "A100-4C"),
        ("00000000:17:00.0", "3251634220", "A100-20C"),
        ("00000000:B1:00.0", "3251634241", "A100-20C"),
    ]
    a, b, c = records
    assert a.vgpu_identity == "d2668621-addf-11eb-94cf-ca3b2a15ab98"
    assert a.vm_identity == "5c0038dc-4129-4dc3-8b64-20d309565abb" and a.vm_name == "instance-00002903"
    assert (a.fb_total_mib, a.fb_used_mib, a.gpu_util_pct) == (4096, 1310, 37)
    assert b.vm_name == "train-07" and b.vgpu_identity == "3e1a9c55-7b2f-11ee-8c90-0242ac120002"
    assert c.vgpu_name == "GRID A100-20C" and c.vgpu_uuid == "" and c.vm_uuid == ""
    assert c.vgpu_identity == "9d3c2b1a-0f4e-4d5c-8b6a-7e8f9a0b1c2d" and c.vm_identity == "analytics-vm"


def test_a_vgpu_without_any_uuid_is_known_by_bus_id_and_vgpu_id():
    text = REAL_Q.replace("00000000-0000-0000-0000-000000000101", "N/A")
    (r,) = parse_vgpu_query(text)
    assert r.mdev_uuid == "" and r.vgpu_identity == "00000000:01:00.0/3251634190"


def test_only_gpus_without_vgpus_is_an_empty_host_not_an_error():
    text = "GPU 00000000:17:00.0\n    Active vGPUs                          : 0\n\n" \
           "GPU 00000000:31:00.0\n    Active vGPUs                          : 0\n"
    assert parse_vgpu_query(text) == []


def test_header_lines_of_newer_drivers_and_a_mig_backed_vgpu_without_uuid_lines():
    text = ("\n==============NVSMI LOG==============\n\n"
            "Timestamp                                 : Wed Jul 22 15:37:16 2026\n"
            "Driver Version                            : 580.105.06\n"
            "vGPU Driver Capability\n"
            "        Heterogenous Multi-vGPU           : Supported\n\n"
            "GPU 00000001:04:00.0\n"
            "    Active vGPUs                          : 1\n"
            "    vGPU ID                               : 3251669307\n"
            "        VM UUID                           : de083752-e908-421a-a965-b18f302e5cb0\n"
            "        VM Name                           : instance-00000012\n"
            "        vGPU Name                         : NVIDIA RTX Pro 6000 Blackwell DC-1-2Q\n"
            "        GPU Instance ID                   : 3\n"
            "        Utilization\n"
            "            GPU                           : N/A\n")
    (r,) = parse_vgpu_query(text)
    assert r.bus_id == "00000001:04:00.0" and r.profile == "RTX Pro 6000 Blackwell DC-1-2Q"
    assert r.gpu_instance_id == 3 and r.gpu_util_pct is None and r.fb_total_mib is None
    assert r.vgpu_identity == "00000001:04:00.0/3251669307"


def test_vm_id_of_a_hypervisor_without_vm_uuids_is_the_vm_identity():
    text = REAL_Q.replace("        VM UUID                           : \n",
                          "        VM ID                             : 2390037\n")
    (r,) = parse_vgpu_query(text)
    assert r.vm_uuid == "2390037" and r.vm_identity == "2390037"


@pytest.mark.parametrize("printed, name", [
    ("win10test,debug-threads=on", "win10test"),
    ("guest=train-07,debug-threads=on", "train-07"),
    ("a,,b,debug-threads=on", "a,b"),
    ("instance-00002903", "instance-00002903"),
    ("Finance, Q3 report", "Finance, Q3 report"),  # a comma not followed by QEMU options: a real name
])
def test_qemu_name_argument_is_cut_to_the_name(printed, name):
    assert qemu_vm_name(printed) == name


@pytest.mark.parametrize("printed, profile", [
    ("NVIDIA RTXA6000-2Q", "RTXA6000-2Q"), ("GRID A100-40C", "A100-40C"), ("NVIDIA A100-4C", "A100-4C"),
    ("A100-4C", "A100-4C"), ("NVIDIA", "NVIDIA"),
])
def test_profile_drops_the_vendor_word(printed, profile):
    assert profile_of(printed) == profile


def test_the_nvidia_smi_vgpu_table_is_rejected_at_its_first_line():
    with pytest.raises(NvidiaSmiError, match=r"^line 1: .*nvidia-smi vgpu -q"):
        parse_vgpu_query(REAL_TABLE)


@pytest.mark.parametrize("text, where", [
    ("", "line 1: no 'GPU <bus id>' block"),
    ("No devices were found\n", "line 1: 'No devices were found' is neither"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "line 1: "),
    (REAL_Q.split("    vGPU ID")[0], "line 2: GPU 00000000:01:00.0 says 1 active vGPUs but lists 0"),
    (REAL_Q.replace("NVIDIA RTXA6000-2Q", "N/A"), "line 3: vGPU 3251634190 on GPU 00000000:01:00.0 has no 'vGPU Name'"),
    (REAL_Q.replace("GPU 00000000:01:00.0", "GPU 01:00"), "line 1: '01:00' is not a PCI bus id"),
    ("GPU 00000000:01:00.0\n", "line 1: GPU 00000000:01:00.0 has no 'Active vGPUs"),
    ("    vGPU ID : 3251634190\n        vGPU Name : NVIDIA A100-4C\n", "line 1: 'vGPU ID' outside"),
    (REAL_Q.replace("    Active vGPUs                          : 1", "    Active vGPUs : many"),
     "line 2: Active vGPUs 'many' is not a number"),
    (REAL_Q + REAL_Q, "line 36: GPU 00000000:01:00.0 is printed twice"),
])
def test_text_of_another_format_is_an_error_naming_the_line(text, where):
    with pytest.raises(NvidiaSmiError) as info:
        parse_vgpu_query(text)
    assert str(info.value).startswith(where)


def test_gpu_uuids_by_normalized_bus_id():
    uuids = parse_gpu_uuids(A100_CSV)
    assert uuids == {"00000000:17:00.0": "GPU-9a1c3e5f-2b4d-4f60-8a1b-c2d3e4f5a617",
                     "00000000:31:00.0": "GPU-4e7d2c1b-9a8f-4e3d-b2c1-a0f9e8d7c631",
                     "00000000:B1:00.0": "GPU-b1f0e9d8-c7b6-4a5f-9e8d-7c6b5a4f3eb1"}
    by_bus = {r.bus_id: r for r in parse_vgpu_query(A100_Q)}
    assert set(by_bus) <= set(uuids)


def test_gpu_uuids_compare_bus_ids_in_one_spelling_and_skip_a_header():
    uuids = parse_gpu_uuids("pci.bus_id, uuid\n0000:b1:00.0, GPU-b1\n\n00000000:17:00.0,GPU-17\n")
    assert uuids == {"00000000:B1:00.0": "GPU-b1", "00000000:17:00.0": "GPU-17"}
    assert normalize_bus_id("b1:00.0") == normalize_bus_id("00000000:B1:00.0") == "00000000:B1:00.0"


@pytest.mark.parametrize("text, where", [
    ("00000000:17:00.0, GPU-17\n00000000:31:00.0\n", "line 2: '00000000:31:00.0' is not 'bus id, uuid'"),
    ("00000000:17:00.0, 0\n", "line 1: '0' is not a GPU UUID"),
    ("index 0, GPU-17\n", "line 1: 'index 0' is not a PCI bus id"),
    ("0000:17:00.0, GPU-a\n00000000:17:00.0, GPU-b\n", "line 2: bus id 00000000:17:00.0 is listed twice"),
])
def test_gpu_uuid_csv_errors_name_the_line(text, where):
    with pytest.raises(NvidiaSmiError) as info:
        parse_gpu_uuids(text)
    assert str(info.value).startswith(where)
