"""The API probe's pure parts: records → devices, llama.cpp's default device choice, the cross-check."""

from conftest import captured

from buildmgr.backends.cuda.smi import NvidiaGpu
from buildmgr.backends.vulkan.info import VulkanGpu
from buildmgr.core.device_records import Selection, State
from buildmgr.core.proc import Ran
from buildmgr.devices.ggml_api import MARKER
from buildmgr.devices.identity import assign_physical_ids, default_selection, enrich
from buildmgr.devices.probe import api_devices, cross_check

USED = Selection(State.USED)

GIB = 1 << 30


def record(index, name, backend, kind, device_id, total_gib=141, description="NVIDIA H200"):
    return {
        "index": index,
        "name": name,
        "backend": backend,
        "description": description,
        "memory_free": total_gib * GIB - 512 * (1 << 20),
        "memory_total": total_gib * GIB,
        "type": kind,
        "device_id": device_id,
        "caps": {
            "async": True,
            "host_buffer": True,
            "buffer_from_host_ptr": False,
            "events": True,
            "mmap_support": True,
        },
    }


TWO_H200 = [
    record(0, "CUDA0", "CUDA", "gpu", "0000:00:06.0"),
    record(1, "CUDA1", "CUDA", "gpu", "0000:00:07.0"),
    record(2, "Vulkan0", "Vulkan", "gpu", "0000:00:06.0"),
    record(3, "Vulkan1", "Vulkan", "gpu", "0000:00:07.0"),
    record(4, "CPU", "CPU", "cpu", None, description="Intel Xeon"),
]


def api(records):
    import json

    from buildmgr.devices.ggml_api import MARKER

    return api_devices(Ran(0, "noise\n" + MARKER + json.dumps(records) + "\n", "", 1.0))


def test_records_become_devices_without_the_cpu_and_with_mib_as_list_devices_prints():
    devices, error = api(TWO_H200)
    assert error == "" and [d.name for d in devices] == ["CUDA0", "CUDA1", "Vulkan0", "Vulkan1"]
    cuda0 = devices[0]
    assert (cuda0.memory_total_mib, cuda0.memory_free_mib) == (141 * 1024, 141 * 1024 - 512)
    assert (cuda0.type, cuda0.ggml_type, cuda0.pci_bus_id, cuda0.source) == ("gpu", "gpu", "0000:00:06.0", "ggml-api")


def test_twin_cards_pair_by_pci_id_and_follow_the_cards_when_renamed():
    devices, _ = api(TWO_H200)
    ids = {d.name: d.physical_id for d in assign_physical_ids(devices)[0]}
    assert ids["CUDA0"] == ids["Vulkan0"] == "pci:0000:00:06.0"
    assert ids["CUDA1"] == ids["Vulkan1"] == "pci:0000:00:07.0"
    # CUDA_VISIBLE_DEVICES=1 GGML_VK_VISIBLE_DEVICES=1: both backends' device 0 is the second card
    renamed, _ = api(
        [record(0, "CUDA0", "CUDA", "gpu", "0000:00:07.0"), record(1, "Vulkan0", "Vulkan", "gpu", "0000:00:07.0")]
    )
    assert {d.physical_id for d in assign_physical_ids(renamed)[0]} == {"pci:0000:00:07.0"}


def test_nvidia_smi_and_vulkaninfo_enrich_by_pci_then_uuid():
    devices, _ = api(TWO_H200)
    nvidia = [
        NvidiaGpu(1, "NVIDIA H200", "bbbb", "0000:00:07.0", 143771),
        NvidiaGpu(0, "NVIDIA H200", "aaaa", "0000:00:06.0", 143771),
    ]
    vulkan = [VulkanGpu(0, "NVIDIA H200", "gpu", "aaaa"), VulkanGpu(1, "NVIDIA H200", "gpu", "bbbb")]
    enriched, _ = enrich(devices, captured(nvidia, vulkan))
    assert {d.name: d.uuid for d in enriched} == {
        "CUDA0": "aaaa",
        "CUDA1": "bbbb",
        "Vulkan0": "aaaa",
        "Vulkan1": "bbbb",
    }


def test_lavapipe_is_a_cpu_driver_whatever_ggml_calls_it():
    [device], _ = api([record(0, "Vulkan0", "Vulkan", "gpu", None, 2, "llvmpipe (LLVM 15.0.6, 256 bits)")])
    [typed], notes = enrich(
        [device], captured(vulkan=[VulkanGpu(0, "llvmpipe (LLVM 15.0.6, 256 bits)", "cpu", "6d65")])
    )
    assert typed.type == "cpu" and typed.ggml_type == "gpu"
    assert notes == ["Vulkan0: ggml reports gpu, but vulkaninfo says it is a CPU driver"]


def test_default_selection_skips_the_second_name_of_one_card():
    devices, _ = api(TWO_H200)
    assert default_selection(devices) == {
        "CUDA0": USED,
        "CUDA1": USED,
        "Vulkan0": Selection(State.SKIPPED, "same device id as CUDA0"),
        "Vulkan1": Selection(State.SKIPPED, "same device id as CUDA1"),
    }
    assert default_selection(devices)["Vulkan0"].sentence() == "skipped: same device id as CUDA0"  # as stored


def test_default_selection_leaves_the_igpu_out_beside_a_discrete_card():
    devices, _ = api(
        [
            record(0, "ROCm0", "ROCm", "igpu", "0000:c3:00.0", 96, "AMD Radeon Graphics"),
            record(1, "Vulkan0", "Vulkan", "igpu", "0000:c3:00.0", 124, "AMD Radeon Graphics (RADV GFX1151)"),
            record(2, "Vulkan1", "Vulkan", "gpu", "0000:01:00.0", 24, "NVIDIA GeForce RTX 4090"),
            record(3, "RPC0", "RPC", "gpu", None, 24, "192.168.1.7:50052"),
        ]
    )
    chosen = default_selection(devices)
    assert chosen["Vulkan1"] == USED and chosen["RPC0"] == Selection(State.USED, "RPC server")
    assert chosen["ROCm0"].state is State.UNUSED  # iGPUs only where there is no discrete GPU
    assert chosen["Vulkan0"] == Selection(State.SKIPPED, "iGPU already used through ROCm")
    assert chosen["RPC0"].sentence() == "used (RPC server)"
    assert [d.type for d in devices] == ["igpu", "igpu", "gpu", "remote"]
    apu_only = default_selection(devices[:2])
    assert apu_only == {"ROCm0": USED, "Vulkan0": Selection(State.SKIPPED, "iGPU already used through ROCm")}


def test_without_ggml_types_the_choice_is_unknown_not_guessed():
    from buildmgr.devices.captures import parse_list_devices

    listed = parse_list_devices("Available devices:\n  CUDA0: NVIDIA H200 (1 MiB, 1 MiB free)\n")
    assert default_selection(listed)["CUDA0"].state is State.UNKNOWN


def test_cross_check_reports_names_missing_on_either_side():
    devices, _ = api(TWO_H200)
    assert cross_check(devices[:3], devices[1:]) == (
        "CUDA0: given by ggml's API but not by --list-devices",
        "Vulkan1: listed by --list-devices but not by ggml's API",
    )
    assert cross_check(devices, devices) == ()


def test_a_crashed_or_silent_child_is_explained():
    assert api_devices(Ran(-11, "", "", 1.0)) == (None, "crashed (SIGSEGV)")
    assert api_devices(Ran(-1, "", "", 60.0, timed_out=True)) == (None, "timed out after 60 s")
    assert api_devices(Ran(0, "no marker", "", 1.0)) == (None, "no 'buildmgr-ggml-api:' line in its output")


def test_an_answer_of_another_shape_is_named_for_what_it_lacks():
    """Issue #67: a missing answer line was read as None and iterated to raise a TypeError on purpose, which the same
    handler caught with any other TypeError: each shape says what is wrong with it instead."""
    said = {
        "no marker": "no 'buildmgr-ggml-api:' line in its output",
        MARKER + "{": "unreadable answer (not JSON:",
        MARKER + '{"name": "CUDA0"}': "unreadable answer (not a list of device records)",
        MARKER + "[1, 2]": "unreadable answer (not a list of device records)",
        MARKER + '[{"name": "CUDA0"}]': "unreadable answer (a device record without 'backend')",
    }
    for stdout, why in said.items():
        devices, reason = api_devices(Ran(0, stdout, "", 1.0))
        assert devices is None and reason.startswith(why), (stdout, reason)
