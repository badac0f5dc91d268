"""Parsing what llama.cpp tools, vulkaninfo and nvidia-smi print: captured on real hosts, or constructed."""

from pathlib import Path

import pytest

from buildmgr.backends.cuda.smi import parse_nvidia_smi_csv
from buildmgr.backends.vulkan.info import parse_vulkaninfo_summary
from buildmgr.core.device_records import DrmCard
from buildmgr.core.errors import UserError
from buildmgr.devices.captures import parse_list_devices
from buildmgr.devices.probe import read_drm_cards

FIXTURES = Path(__file__).parent / "fixtures"


def names(text: str) -> list[str]:
    return [d.name for d in parse_list_devices(text)]


def test_h200_cuda_and_vulkan_with_stderr_noise():
    devices = parse_list_devices((FIXTURES / "h200" / "list-devices.txt").read_text())
    assert [(d.name, d.backend, d.index, d.description, d.memory_total_mib, d.memory_free_mib) for d in devices] == [
        ("CUDA0", "CUDA", 0, "NVIDIA H200", 143155, 142612),
        ("Vulkan0", "Vulkan", 0, "NVIDIA H200", 143771, 142612),
    ]


def test_h200_with_cuda_or_vulkan_hidden():
    assert names((FIXTURES / "h200" / "list-devices-no-cuda.txt").read_text()) == ["Vulkan0"]
    assert names((FIXTURES / "h200" / "list-devices-no-vulkan.txt").read_text()) == ["CUDA0"]


def test_none():
    assert parse_list_devices("Available devices:\n  (none)\n") == []


def test_parentheses_in_descriptions_blas_rpc_and_many_backends():
    text = """load_backend: loaded RPC backend
Available devices:
  ROCm0: AMD Radeon Graphics (65536 MiB, 60000 MiB free)
  Vulkan0: NVIDIA GeForce RTX 4090 (24564 MiB, 23000 MiB free)
  Vulkan1: AMD Radeon Graphics (RADV GFX1151) (65536 MiB, 61234 MiB free)
  BLAS: OpenBLAS (0 MiB, 0 MiB free)
  RPC0: 192.168.1.7:50052 (24000 MiB, 23000 MiB free)
  SYCL0: Intel(R) Arc(TM) A770 Graphics (16225 MiB, 16225 MiB free)
  MTL0: Apple M3 Max (98304 MiB, 98303 MiB free)
  GPUOpenCL: QUALCOMM Adreno(TM) 750 (0 MiB, 0 MiB free)
"""
    devices = {d.name: d for d in parse_list_devices(text)}
    assert list(devices) == ["ROCm0", "Vulkan0", "Vulkan1", "BLAS", "RPC0", "SYCL0", "MTL0", "GPUOpenCL"]
    assert devices["Vulkan1"].description == "AMD Radeon Graphics (RADV GFX1151)"
    assert devices["Vulkan1"].memory_total_mib == 65536 and devices["Vulkan1"].index == 1
    assert devices["SYCL0"].description == "Intel(R) Arc(TM) A770 Graphics"
    assert (devices["BLAS"].type, devices["BLAS"].index) == ("accel", None)
    assert devices["RPC0"].description == "192.168.1.7:50052" and devices["RPC0"].type == "remote"
    # Text alone never proves a discrete card: ROCm0 here could be an APU's iGPU
    assert devices["ROCm0"].type == devices["Vulkan0"].type == "unknown"
    assert devices["GPUOpenCL"].index is None


def test_noise_inside_the_block_is_skipped():
    text = "Available devices:\n  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes\n  CUDA0: NVIDIA H200 (1 MiB, 1 MiB free)\nggml_vulkan: Found 0 Vulkan devices:\n"
    assert names(text) == ["CUDA0"]


def test_no_block_is_a_user_error():
    with pytest.raises(UserError, match="no 'Available devices:' block"):
        parse_list_devices("version: 0.5.0-dev (build 0, commit 0c1e570)\n")


def test_vulkaninfo_summary_of_lavapipe():
    gpus = parse_vulkaninfo_summary((FIXTURES / "lavapipe-vulkaninfo-summary.txt").read_text())
    assert [(g.index, g.name, g.type, g.uuid) for g in gpus] == [
        (0, "llvmpipe (LLVM 15.0.6, 256 bits)", "cpu", "6d657361-3232-2e33-2e36-000000000000")
    ]


def test_nvidia_smi_csv_of_the_h200():
    gpus = parse_nvidia_smi_csv((FIXTURES / "h200" / "nvidia-smi.csv").read_text())
    assert [(g.index, g.name, g.uuid, g.pci_bus_id, g.memory_total_mib) for g in gpus] == [
        (
            0,
            "NVIDIA H200",
            "1fdea520-81c5-69c8-0529-9a5edbbe6109",
            "0000:00:06.0",
            143771,
        )  # nvidia-smi's 8-digit domain, normalised
    ]


def test_kernel_gpus_from_sysfs(tmp_path):
    """A laptop as sysfs shows it: NVIDIA dGPU + AMD iGPU, a connector entry, and a card with no device."""
    for card, driver, slot, vendor in (
        ("card0", "nvidia", "0000:01:00.0", "0x10de"),
        ("card1", "amdgpu", "0000:c3:00.0", "0x1002"),
    ):
        device = tmp_path / card / "device"
        device.mkdir(parents=True)
        (device / "uevent").write_text(f"DRIVER={driver}\nPCI_CLASS=30000\nPCI_SLOT_NAME={slot}\n")
        (device / "vendor").write_text(f"{vendor}\n")
    (tmp_path / "card1-eDP-1").mkdir()
    (tmp_path / "card2").mkdir()
    assert read_drm_cards(tmp_path) == [
        DrmCard("card0", "nvidia", "0000:01:00.0", "0x10de"),
        DrmCard("card1", "amdgpu", "0000:c3:00.0", "0x1002"),
    ]
    assert read_drm_cards(tmp_path / "absent") == []


@pytest.mark.parametrize(
    ("script", "mode", "says"),
    [
        ("#!/bin/sh\necho hi\n", 0o644, "could not start: [Errno 13] Permission denied"),
        # SIGKILL: the one no parent shell can have set to be ignored (nohup ignores SIGHUP for its children)
        ("#!/bin/sh\nkill -KILL $$\n", 0o755, "crashed (SIGKILL)"),
        ("#!/bin/sh\necho 'no such device' >&2\nexit 3\n", 0o755, "exit 3: no such device"),
    ],
    ids=["cannot start", "killed by a signal", "exit code"],
)
def test_a_probe_that_fails_says_how(tmp_path, script, mode, says):
    """A tool that cannot start is not a crash: the reason is the OS's, not a signal read from the -1."""
    from buildmgr.devices.probe import probe_build

    tool = tmp_path / "bin" / "llama-bench"
    tool.parent.mkdir()
    tool.write_text(script)
    tool.chmod(mode)
    result = probe_build(tmp_path, {"PATH": "/usr/bin:/bin"}, timeout=30)
    assert not result.ok and result.error.startswith(says), result.error
