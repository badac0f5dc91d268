"""`--parse` on text people paste from every kind of host (fixtures in fixtures/captures/)."""

from pathlib import Path

import pytest

from buildmgr.captures import parse_list_devices
from buildmgr.devices import normalize_pci
from buildmgr.identity import resolve

CAPTURES = Path(__file__).parent / "fixtures" / "captures"


def parsed(name: str):
    return [
        (d.name, d.description, d.memory_total_mib, d.memory_free_mib)
        for d in parse_list_devices((CAPTURES / name).read_text())
    ]


def test_rpc_server_devices_block_without_its_transport_line():
    assert parsed("rpc-server.txt") == [("CUDA0", "NVIDIA GeForce RTX 4090", 24080, 23512)]


def test_metal_and_blas_without_an_index_and_mtl0():
    assert parsed("metal-old-and-blas.txt") == [
        ("Metal", "Apple M2 Max", 73728, 73727),
        ("BLAS", "Accelerate", 0, 0),
    ]
    assert [d.index for d in parse_list_devices((CAPTURES / "metal-old-and-blas.txt").read_text())] == [None, None]
    assert parsed("metal-new.txt")[0] == ("MTL0", "Apple M4 Pro", 36864, 36863)


def test_missing_memory_is_kept_as_null_and_free_over_total_as_printed():
    assert parsed("no-memory-and-free-over-total.txt") == [
        ("CUDA0", "NVIDIA GeForce RTX 3060", None, None),
        ("Vulkan0", "Intel(R) Arc(TM) A770 Graphics (DG2)", 16225, 16480),
        ("SYCL0", "Intel(R) Arc(TM) A770 Graphics", 15473, 15473),
        ("RPC0", "192.168.1.7:50052", 24080, 23512),
        ("Vulkan1", "NVIDIA GeForce RTX 3060/PCIe/SSE2", 12288, 11000),
    ]


def test_log_prefixes_and_prompt_lines():
    assert parsed("ollama-log.txt") == [("CUDA0", "NVIDIA GeForce RTX 4070 Laptop GPU", 8188, 7770)]


def test_block_before_the_init_logs_ignores_their_device_lines():
    assert [n for n, *_ in parsed("block-before-init-logs.txt")] == ["CUDA0", "CUDA1"]


def test_roles_from_text_never_claim_a_discrete_gpu():
    roles = {d.name: d.type for d in parse_list_devices((CAPTURES / "no-memory-and-free-over-total.txt").read_text())}
    assert roles == {
        "CUDA0": "unknown",
        "Vulkan0": "unknown",
        "SYCL0": "unknown",
        "RPC0": "remote",
        "Vulkan1": "unknown",
    }


def test_strix_halo_igpu_under_rocm_and_vulkan_is_one_card_from_the_uma_line():
    devices, notes = resolve(parse_list_devices((CAPTURES / "strix-halo.txt").read_text()), {})
    rocm, vulkan = devices
    assert (rocm.memory_total_mib, vulkan.memory_total_mib) == (98304, 126976)  # 29 % apart
    assert rocm.physical_id == vulkan.physical_id and rocm.type == vulkan.type == "igpu"
    assert "ROCm0 ≡ Vulkan0 by description and memory only (no hardware id for both)" in notes
    assert "iGPU = ROCm0 (AMD Radeon Graphics)" in notes


def test_same_name_without_a_driver_parenthesis_and_far_apart_memory_stays_apart():
    text = "Available devices:\n  CUDA0: NVIDIA A100 (40000 MiB, 1 MiB free)\n  Vulkan0: NVIDIA A100 (81000 MiB, 1 MiB free)\n"
    cuda, vulkan = resolve(parse_list_devices(text), {})[0]
    assert cuda.physical_id != vulkan.physical_id


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("00000000:06:00.0", "0000:06:00.0"),
        ("0000:C1:00.0", "0000:c1:00.0"),
        ("06:00.0", "0000:06:00.0"),
        ("0000:06:00.0-v1", "0000:06:00.0-v1"),
        ("metal:0", None),
        (None, None),
    ],
)
def test_pci_ids_are_comparable_across_tools(raw, normal):
    assert normalize_pci(raw) == normal
