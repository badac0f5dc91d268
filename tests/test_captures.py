"""`--parse` on text people paste from every kind of host (fixtures in fixtures/captures/)."""

import re
from pathlib import Path

import pytest

from buildmgr.core.device_records import normalize_pci
from buildmgr.core.errors import UserError
from buildmgr.devices.captures import parse_list_devices, read_text
from buildmgr.devices.identity import resolve
from buildmgr.devices.probe import device_from_api

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


# --- any text a user pastes (issue 19): real captures from public reports, each with its source in its first line ---

V = "Vulkan"
# file → every device as (name, description, total MiB, free MiB, role); groups: the names that are one card.
PASTED = {
    "vulkan-lines-arc-130v-ollama.txt": [
        ("Vulkan0", "Intel(R) Arc(TM) 130V GPU (16GB)", None, None, "igpu"),
    ],
    "vulkan-lines-radeon-890m.txt": [("Vulkan0", "AMD Radeon Graphics (RADV GFX1150)", None, None, "igpu")],
    "cuda-init-two-identical-3090.txt": [
        ("CUDA0", "NVIDIA GeForce RTX 3090", None, None, "unknown"),
        ("CUDA1", "NVIDIA GeForce RTX 3090", None, None, "unknown"),
    ],
    "rocm-init-cublas-2024.txt": [("ROCm0", "AMD Radeon RX 7900 XTX", None, None, "unknown")],
    "load-log-using-device-rx6700xt.txt": [("Vulkan0", "AMD Radeon RX 6700 XT", None, 12272, "gpu")],
    "load-log-using-device-8060s.txt": [("Vulkan0", "Radeon 8060S Graphics (RADV GFX1151)", None, 87722, "igpu")],
    "ctest-llvmpipe.txt": [("Vulkan0", "llvmpipe (LLVM 20.1.8, 256 bits)", None, None, "cpu")],
    "vulkan-no-devices.txt": [],
    "dozen-beside-native-2024.txt": [
        ("Vulkan0", "AMD Radeon RX 6800 XT", None, None, "gpu"),
        ("Vulkan1", "Microsoft Direct3D12 (AMD Radeon RX 6800 XT)", None, None, "gpu"),
    ],
    "dozen-adreno-and-vulkaninfo.txt": [
        ("Vulkan0", "Microsoft Direct3D12 (Qualcomm(R) Adreno(TM) X1-85 GPU)", None, None, "igpu"),
    ],
    "opencl-adreno-830.txt": [
        ("GPUOpenCL", "QUALCOMM Adreno(TM) 830", None, None, "igpu"),  # ggml's description: the name alone
    ],
    "intel-uhd-630-name-only.txt": [
        ("Vulkan0", "Intel(R) UHD Graphics 630 (CFL GT2)", None, None, "igpu"),
    ],
    "test-backend-ops-a770-uhd770.txt": [
        ("Vulkan0", "Intel(R) Arc(TM) A770 Graphics", None, None, "gpu"),
        ("Vulkan1", "Intel(R) UHD Graphics 770", None, None, "igpu"),
    ],
    "test-backend-ops-gtx1050ti.txt": [("Vulkan0", "NVIDIA GeForce GTX 1050 Ti", 4342, 2630, "gpu")],
    "device-info-two-3090-and-cpu.txt": [
        ("CUDA0", "NVIDIA GeForce RTX 3090", 24575, 31032, "unknown"),
        ("CUDA1", "NVIDIA GeForce RTX 3090", 24575, 30950, "unknown"),
        ("CPU", "AMD Ryzen 9 5900X 12-Core Processor", 32045, 32045, "cpu"),
    ],
    "moltenvk-two-radeons.txt": [
        ("Vulkan0", "AMD Radeon RX 6800 XT", None, 16368, "gpu"),
        ("Vulkan1", "AMD Radeon Pro 5500M", None, None, "gpu"),
    ],
    "llamafile-register-device.txt": [
        ("CUDA0", "NVIDIA GeForce RTX 3060", None, None, "unknown"),
        ("CPU", "CPU", None, None, "cpu"),
    ],
    "two-identical-radv-gfx1201.txt": [
        ("Vulkan0", "AMD Radeon Graphics (RADV GFX1201)", None, None, "gpu"),
        ("Vulkan1", "AMD Radeon Graphics (RADV GFX1201)", None, None, "gpu"),
    ],
    "vulkan-2024-apu-alone.txt": [
        ("Vulkan0", "AMD Radeon(TM) Graphics", None, None, "igpu"),
    ],
    # issue 34's shapes: rows without their header, Metal's start-up block (its working set in MB or MiB is the
    # total), OpenCL's description without the version, discrete Intel cards under generic names (never an iGPU),
    # AMD iGPUs under ROCm by their gfx id or name, nameless ROCm devices
    "bare-row-csharp-comment-cuda0.txt": [
        ("CUDA0", "NVIDIA P104-100", 8109, 8020, "unknown"),
    ],
    "metal-m1-old-ggml_metal_init-ollama.txt": [
        ("Metal", "Apple M1", 10922, None, "igpu"),
    ],
    "metal-m4-ci-timestamped-log.txt": [
        ("Metal", "Apple M4", 10922, None, "igpu"),
    ],
    "metal-amd-radeon-vii-discrete-old.txt": [
        ("Metal", "AMD Radeon VII", None, None, "unknown"),
    ],
    "metal-gpu-name-before-after-pr22318.txt": [
        ("MTL0", "Apple M5 Max", None, None, "igpu"),
    ],
    "opencl-adreno-830-android.txt": [
        ("GPUOpenCL", "QUALCOMM Adreno(TM) 830", None, None, "igpu"),
    ],
    "opencl-intel-uhd730-quoted.txt": [
        ("Vulkan0", "Intel(R) UHD Graphics 730 (ADL-S GT1)", None, None, "igpu"),
        ("GPUOpenCL", "Intel(R) UHD Graphics 730", None, None, "igpu"),
    ],
    "opencl-adreno-early-selecting-device.txt": [
        ("GPUOpenCL", "QUALCOMM Adreno(TM)", None, None, "igpu"),
    ],
    "rocm-amd-radeon-graphics-gfx1152.txt": [
        ("ROCm0", "AMD Radeon Graphics", None, None, "igpu"),
    ],
    "rocm-dgpu-plus-igpu-total-vram-header.txt": [
        ("ROCm0", "AMD Radeon RX 9070", 16304, None, "unknown"),
        ("ROCm1", "AMD Radeon 740M Graphics", 15594, None, "igpu"),
    ],
    "rocm-890m-compute-capability-ollama-windows.txt": [
        ("ROCm0", "AMD Radeon(TM) 890M Graphics", None, 16847, "igpu"),
    ],
    "rocm-old-cublas-header-empty-device-names.txt": [
        ("ROCm0", "", None, None, "unknown"),
        ("ROCm1", "", None, None, "unknown"),
        ("ROCm2", "", None, None, "unknown"),
        ("ROCm3", "", None, None, "unknown"),
    ],
    "sycl-b580-0xe20b-using-device.txt": [
        ("SYCL0", "Intel(R) Graphics [0xe20b]", None, 11605, "unknown"),
    ],
    "sycl-list-devices-arc-pro-b70-bmg-g31.txt": [
        ("SYCL0", "Intel(R) Arc(TM) Pro B70 Graphics", 31906, 31906, "unknown"),
        ("SYCL1", "Intel(R) Arc(TM) Pro B70 Graphics", 31906, 31906, "unknown"),
    ],
    "vulkan-intel-bmg-g21-arc-pro-b50.txt": [
        ("Vulkan0", "Intel(R) Graphics (BMG G21)", None, None, "gpu"),
    ],
    "vulkan-intel-arc-a770-windows.txt": [
        ("Vulkan0", "Intel(R) Arc(TM) A770 Graphics", None, None, "gpu"),
    ],
}
# file → the driver each device's start-up line names beside its description (Vulkan's `(%s) | uma:`)
DRIVERS = {
    "ctest-llvmpipe.txt": {"Vulkan0": "llvmpipe"},
    "dozen-adreno-and-vulkaninfo.txt": {"Vulkan0": "Dozen"},
    "dozen-beside-native-2024.txt": {"Vulkan0": "AMD proprietary driver", "Vulkan1": "Dozen"},
    "intel-uhd-630-name-only.txt": {"Vulkan0": "Intel open-source Mesa driver"},  # quoted without `| uma: …`
    "load-log-using-device-8060s.txt": {"Vulkan0": "radv"},
    "load-log-using-device-rx6700xt.txt": {"Vulkan0": "AMD proprietary driver"},
    "moltenvk-two-radeons.txt": {"Vulkan0": "MoltenVK", "Vulkan1": "MoltenVK"},
    "opencl-intel-uhd730-quoted.txt": {"Vulkan0": "Intel open-source Mesa driver"},
    "test-backend-ops-a770-uhd770.txt": {"Vulkan0": "Intel Corporation", "Vulkan1": "Intel Corporation"},
    "test-backend-ops-gtx1050ti.txt": {"Vulkan0": "NVIDIA"},
    "two-identical-radv-gfx1201.txt": {"Vulkan0": "radv", "Vulkan1": "radv"},
    "vulkan-2024-apu-alone.txt": {"Vulkan0": "AMD proprietary driver"},
    "vulkan-intel-arc-a770-windows.txt": {"Vulkan0": "Intel Corporation"},
    "vulkan-intel-bmg-g21-arc-pro-b50.txt": {"Vulkan0": "Intel open-source Mesa driver"},
    "vulkan-lines-arc-130v-ollama.txt": {"Vulkan0": "Intel Corporation"},
    "vulkan-lines-radeon-890m.txt": {"Vulkan0": "radv"},
}
GROUPED = {
    "dozen-beside-native-2024.txt": [{"Vulkan0", "Vulkan1"}],
    "opencl-intel-uhd730-quoted.txt": [{"Vulkan0", "GPUOpenCL"}],
}


def resolved(text: str):
    """What `devices --parse` shows of a text: what was read, the devices with identity and roles, every note."""
    parsed = read_text(text)
    devices, notes = resolve(list(parsed.devices), {})
    return parsed, devices, [*parsed.notes, *notes]


def pasted(name: str):
    return resolved((CAPTURES / name).read_text())


@pytest.mark.parametrize("name", sorted(PASTED))
def test_pasted_capture_names_descriptions_memory_and_roles(name):
    source = (CAPTURES / name).read_text().splitlines()[0]
    assert source.startswith("# source: https://"), "every pasted capture names where it was collected"
    _, devices, _ = pasted(name)
    assert [(d.name, d.description, d.memory_total_mib, d.memory_free_mib, d.type) for d in devices] == PASTED[name]
    assert {d.name: d.driver for d in devices if d.driver} == DRIVERS.get(name, {})
    groups = [{d.name for d in devices if d.physical_id == p} for p in dict.fromkeys(d.physical_id for d in devices)]
    assert [g for g in groups if len(g) > 1] == GROUPED.get(name, [])


def test_the_index_is_the_one_dev_takes_and_opencl_has_none():
    _, devices, _ = pasted("test-backend-ops-a770-uhd770.txt")
    assert [(d.backend, d.index) for d in devices] == [(V, 0), (V, 1)]
    _, [opencl], _ = pasted("opencl-adreno-830.txt")
    assert (opencl.name, opencl.backend, opencl.index) == ("GPUOpenCL", "GPUOpenCL", None)
    _, [rocm], _ = pasted("rocm-init-cublas-2024.txt")  # the header says ROCm, not CUDA
    assert (rocm.backend, rocm.index) == ("ROCm", 0)


def test_every_role_from_a_name_table_says_so():
    _, _, notes = pasted("intel-uhd-630-name-only.txt")
    assert "Vulkan0: named igpu from its name: Intel UHD, HD and Iris Graphics are integrated" in notes
    _, _, notes = pasted("ctest-llvmpipe.txt")
    assert "Vulkan0: named cpu from its name: llvmpipe (Mesa's lavapipe) is a CPU rasterizer" in notes
    _, devices, notes = pasted("test-backend-ops-a770-uhd770.txt")
    assert [d.role_basis for d in devices] == ["log", "log"]  # the A770's line says uma: 0, the UHD 770's uma: 1
    assert any(n.startswith("Vulkan1: igpu from the log: its ggml_vulkan line says uma: 1") for n in notes)
    assert any(n.startswith("Vulkan0: gpu from the log: its ggml_vulkan line says uma: 0") for n in notes)
    _, _, notes = pasted("sycl-list-devices-arc-pro-b70-bmg-g31.txt")  # issue #35: one line, not one per device
    assert [n for n in notes if "role unknown" in n] == [
        "SYCL0, SYCL1: role unknown (ggml's type not read, no vulkaninfo match, no log line or known name tells it); "
        "not assumed to be discrete"
    ]


def test_dozen_is_grouped_by_name_with_the_card_it_names():
    _, devices, notes = pasted("dozen-beside-native-2024.txt")
    assert devices[0].physical_id == devices[1].physical_id
    assert "Vulkan1 ≡ Vulkan0: grouped by name (Dozen is Vulkan on Direct3D 12, run by the card it names)" in notes


def test_dozen_on_one_of_two_identical_cards_is_not_guessed():
    text = (
        "ggml_vulkan: 0 = AMD Radeon RX 6800 XT (AMD proprietary driver) | uma: 0 | fp16: 1\n"
        "ggml_vulkan: 1 = AMD Radeon RX 6800 XT (AMD proprietary driver) | uma: 0 | fp16: 1\n"
        "ggml_vulkan: 2 = Microsoft Direct3D12 (AMD Radeon RX 6800 XT) (Dozen) | uma: 0 | fp16: 1\n"
    )
    _, devices, notes = resolved(text)
    assert len({d.physical_id for d in devices}) == 3
    assert any("not grouped (identical cards are never merged)" in n for n in notes)


def test_identical_cards_of_one_backend_stay_apart():
    for name in (
        "cuda-init-two-identical-3090.txt",
        "two-identical-radv-gfx1201.txt",
        "device-info-two-3090-and-cpu.txt",
    ):
        _, devices, _ = pasted(name)
        assert len({d.physical_id for d in devices}) == len(devices)


def test_a_log_without_devices_is_an_empty_list_with_what_it_says():
    parsed, devices, notes = pasted("vulkan-no-devices.txt")
    assert devices == [] and parsed.shapes == ()
    assert notes == ["no devices: the log says 'ggml_vulkan: No devices found.'"]
    quiet = read_text("main: llama backend init\nllama_model_loader: loaded meta data with 30 key-value pairs\n")
    assert quiet.devices == () and quiet.notes == (
        "no devices: the text holds llama.cpp log lines (llama_model_loader) but none names a device",
    )


def test_text_that_is_no_llama_log_is_a_user_error():
    with pytest.raises(UserError, match=re.escape("no llama.cpp or ggml log lines")):
        read_text("index, name, memory.total [MiB]\n0, NVIDIA H200, 143771 MiB\n")


def test_vulkaninfo_devices_header_is_not_a_device_list():
    parsed, devices, _ = pasted("dozen-adreno-and-vulkaninfo.txt")
    assert parsed.shapes == ("ggml_vulkan lines",) and [d.name for d in devices] == ["Vulkan0"]


def _body(name: str) -> str:
    return "\n".join(line for line in (CAPTURES / name).read_text().splitlines() if not line.startswith("# source:"))


@pytest.mark.parametrize(
    "name", ["test-backend-ops-a770-uhd770.txt", "cuda-init-two-identical-3090.txt", "load-log-using-device-8060s.txt"]
)
def test_a_log_joined_onto_one_line_reads_as_the_log(name):
    """Derived from the real captures: the same text with every newline made a space (a paste that lost them)."""
    whole = [(d.name, d.description, d.memory_free_mib, d.type) for d in read_text(_body(name)).devices]
    joined = [
        (d.name, d.description, d.memory_free_mib, d.type)
        for d in read_text(" ".join(_body(name).splitlines())).devices
    ]
    assert joined == whole and whole


@pytest.mark.parametrize(
    ("cut", "wrapped"),
    [
        (
            "Intel(R) UHD Graphics 770 (Intel Corporation) | uma: 1",
            "Intel(R) UHD Graphics 770 (Intel\nCorporation) | uma: 1",
        ),
        (" | uma: 1 | fp16", " |\numa: 1 | fp16"),
        (" | uma: 1 | fp16", "\n| uma: 1 | fp16"),
    ],
)
def test_a_ggml_vulkan_line_wrapped_in_two(cut, wrapped):
    """Derived from the real capture: its iGPU's line wrapped by a terminal or a mail client."""
    body = _body("test-backend-ops-a770-uhd770.txt")
    assert cut in body
    devices = read_text(body.replace(cut, wrapped)).devices
    assert [(d.name, d.description, d.driver, d.type) for d in devices][1] == (
        "Vulkan1",
        "Intel(R) UHD Graphics 770",
        "Intel Corporation",
        "igpu",
    )


def test_prefixed_lines_ctest_timestamps_and_journald():
    lines = [
        "3: ggml_vulkan: 0 = Intel(R) Graphics (ADL GT2) (Intel open-source Mesa driver) | uma: 1 | fp16: 1",
        "Sep 04 13:05:08 FORGE ollama[841963]: ggml_cuda_init: found 1 CUDA devices:",
        "Sep 04 13:05:08 FORGE ollama[841963]:   Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes",
        "0.00.245.532 I llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) (0000:01:00.0) - 23500 MiB free",
    ]
    devices = {d.name: d for d in read_text("\n".join(lines)).devices}
    assert devices["Vulkan0"].type == "igpu"
    assert (devices["CUDA0"].description, devices["CUDA0"].pci_bus_id, devices["CUDA0"].memory_free_mib) == (
        "NVIDIA GeForce RTX 4090",
        "0000:01:00.0",
        23500,
    )


def test_rpc_server_cpu_device_is_cpu():
    text = "Devices:\n  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23512 MiB free)\n  CPU: AMD Ryzen 9 7950X 16-Core Processor (63404 MiB, 63404 MiB free)\n"
    roles = {d.name: d.type for d in parse_list_devices(text)}
    assert roles == {"CUDA0": "unknown", "CPU": "cpu"}


def test_the_live_probe_uses_the_same_rules_where_ggml_leaves_a_question():
    listed = parse_list_devices(
        "Available devices:\n  Vulkan0: Intel(R) UHD Graphics 770 (32000 MiB, 31000 MiB free)\n"
    )
    assert (listed[0].type, listed[0].role_basis) == ("igpu", "name")
    record = {"name": "Vulkan0", "backend": "Vulkan", "description": "llvmpipe (LLVM 15.0.6, 256 bits)", "type": "?"}
    unknown_type = device_from_api(record | {"memory_total": 1 << 30, "memory_free": 1 << 30})
    assert (unknown_type.type, unknown_type.role_basis) == ("cpu", "name")
    typed = device_from_api(record | {"type": "gpu", "memory_total": 1 << 30, "memory_free": 1 << 30})
    assert (typed.type, typed.role_basis) == ("gpu", "ggml"), "ggml's own type is never overridden by a name"


@pytest.mark.parametrize(
    ("description", "role"),
    [
        ("AMD Radeon Graphics (RADV RAPHAEL_MENDOCINO)", "igpu"),
        ("AMD Radeon 780M Graphics", "igpu"),
        ("Radeon(TM) Vega 6 Graphics", "igpu"),
        ("AMD Ryzen 7 5700U with Radeon Graphics (RADV RENOIR)", "igpu"),
        ("Intel(R) Iris(R) Xe Graphics (TGL GT2)", "igpu"),
        ("Intel(R) Arc(tm) Graphics (MTL)", "igpu"),
        ("Mali-G710", "igpu"),
        ("SwiftShader Device (Subzero)", "cpu"),
        ("Microsoft Direct3D12 (Microsoft Basic Render Driver) (Dozen)", "cpu"),
        # never claimed from a name: discrete cards, and RADV's name for cards it has no marketing name for
        ("AMD Radeon Graphics (RADV GFX1201)", "unknown"),
        ("AMD Radeon Graphics", "unknown"),
        ("AMD Radeon RX 7600M XT", "unknown"),
        ("AMD Radeon Pro 5600M", "unknown"),
        ("Intel(R) Arc(TM) A770 Graphics (DG2)", "unknown"),
        ("Intel(R) Arc(TM) B580 Graphics", "unknown"),
        ("NVIDIA GeForce RTX 4090", "unknown"),
    ],
)
def test_name_tables(description, role):
    [device] = read_text(f"ggml_vulkan: 0 = {description}\n").devices  # the name alone: no uma group to tell
    assert device.type == role


def test_a_vulkan_line_saying_uma_0_is_a_discrete_card_unless_its_name_is_a_cpu_s():
    """Issue #52: an RTX 4090 and a 3090 stayed `unknown` though their lines said uma: 0 (Vulkan's device type is
    not the integrated one); llvmpipe says uma: 0 too, and its name makes it the CPU."""
    text = (
        "ggml_vulkan: 0 = NVIDIA GeForce RTX 4090 (NVIDIA) | uma: 0 | fp16: 1 | warp size: 32\n"
        "ggml_vulkan: 1 = llvmpipe (LLVM 15.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 1 | warp size: 8\n"
        "ggml_vulkan: 2 = AMD Radeon 780M Graphics (RADV PHOENIX) (radv) | uma: 1 | fp16: 1\n"
    )
    card, cpu, igpu = read_text(text).devices
    assert (card.type, card.role_basis) == ("gpu", "log") and "uma: 0" in (card.role_reason or "")
    assert (cpu.type, cpu.role_basis) == ("cpu", "name") and (igpu.type, igpu.role_basis) == ("igpu", "log")


def test_a_total_alone_is_a_total_and_free_stays_null():
    text = (
        "ggml_cuda_init: found 1 ROCm devices (Total VRAM: 98304 MiB):\n"
        "  Device 0: AMD Radeon Graphics, gfx1151 (0x1151), VMM: no, Wave Size: 32, VRAM: 98304 MiB\n"
    )
    [device] = read_text(text).devices
    assert (device.name, device.memory_total_mib, device.memory_free_mib, device.type) == ("ROCm0", 98304, None, "igpu")
    assert device.role_reason == "this gfx target is an APU's"


def test_llamas_skipping_line_ties_two_names_to_one_card():
    """The load log's own proof (the pin's src/llama.cpp format): the same device id under two backends."""
    text = (
        "llama_model_load_from_file_impl: skipping device Vulkan0 (NVIDIA H200) with id 0000:18:00.0 - already "
        "using device CUDA0 (NVIDIA H200) with the same id\n"
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) (0000:18:00.0) - 142612 MiB free\n"
    )
    _, devices, _ = resolved(text)
    assert [(d.name, d.pci_bus_id, d.physical_id) for d in devices] == [
        ("Vulkan0", "0000:18:00.0", "pci:0000:18:00.0"),
        ("CUDA0", "0000:18:00.0", "pci:0000:18:00.0"),
    ]


def test_a_header_that_lost_its_first_letters_still_names_the_backend():
    """Derived from a real capture (no public one with the cut was found): its header without the leading 'g'."""
    text = (
        (CAPTURES / "rocm-init-cublas-2024.txt")
        .read_text()
        .replace("ggml_init_cublas: found", "gml_init_cublas: found")
    )
    assert "gml_init_cublas: found 1 ROCm devices:" in text and "ggml_init_cublas: found" not in text
    _, [rocm], _ = resolved(text)
    assert (rocm.name, rocm.description) == ("ROCm0", "AMD Radeon RX 7900 XTX")


@pytest.mark.parametrize(
    ("description", "role"),
    [
        ("Intel(R) Graphics (BMG G21) (Intel open-source Mesa driver)", "unknown"),  # Arc B580: discrete
        ("Intel(R) Graphics (BMG G31)", "unknown"),
        ("Intel(R) Graphics (DG2)", "unknown"),  # Alchemist
        ("Intel(R) Arc(tm) A770 Graphics (DG2)", "unknown"),
        ("Intel(R) Graphics [0xe20b]", "unknown"),  # SYCL's name of a B580
        ("Intel(R) Graphics (RKL GT1)", "igpu"),
        ("Intel(R) Graphics (ADL GT2)", "igpu"),
        ("Intel(R) Graphics (RPL-S)", "igpu"),
        ("Intel(R) Arc(tm) Graphics (MTL)", "igpu"),
        ("Intel(R) UHD Graphics (JSL)", "igpu"),
    ],
)
def test_intel_roles_by_mesa_s_codename_never_call_a_discrete_card_an_igpu(description, role):
    [device] = parse_list_devices(f"Available devices:\n  Vulkan0: {description} (8000 MiB, 7000 MiB free)\n")
    assert device.type == role


def test_a_row_without_a_header_needs_a_backend_s_name_and_the_memory():
    with pytest.raises(UserError, match=r"no llama\.cpp or ggml log lines"):
        read_text("```\nfoo0: some thing (12 MiB, 3 MiB free)\n```\n")
    parsed = read_text("> Vulkan0: AMD Radeon RX 6800 XT (RADV NAVI21) (16368 MiB, 14798 MiB free)\n")
    assert [(d.name, d.memory_total_mib) for d in parsed.devices] == [("Vulkan0", 16368)]
    assert parsed.shapes == ("device rows (no header)",)
