from pathlib import Path

from conftest import make_receipt

from buildmgr.core.device_records import Device
from buildmgr.devices.inventory import load, record_probe, summarize
from buildmgr.devices.inventory_file import BuildEntry, Inventory, ProbeRecord
from buildmgr.devices.probe import ProbeResult
from buildmgr.store import Build

BUILD = Build("vulkan-1234abcd", Path("/p"), make_receipt("vulkan-1234abcd", recipe={"backends": ["CPU", "Vulkan"]}))
LAVAPIPE = Device("Vulkan0", "Vulkan", 0, "llvmpipe (LLVM 15.0.6, 256 bits)", 2048, 2048)


def test_a_failed_probe_is_recorded_but_the_last_good_one_is_kept():
    data = Inventory.empty()
    data = record_probe(
        data, BUILD, ProbeResult(True, (LAVAPIPE,), 0.1, "llama-bench", {"GGML_VK_VISIBLE_DEVICES": "0"})
    )
    data = record_probe(data, BUILD, ProbeResult(False, (), 60.0, "llama-bench", {}, error="timed out after 60 s"))
    entry = data.builds["vulkan-1234abcd"]
    assert entry.probe.ok is False and entry.probe.error == "timed out after 60 s"
    assert [d.name for d in entry.last_good.devices] == ["Vulkan0"]
    data = summarize(data, {})
    assert [d.name for d in data.devices] == ["Vulkan0"]
    assert any("last probe failed (timed out after 60 s)" in n for n in data.notes)
    assert Inventory.from_json(data.to_json()) == data  # what is stored reads back as the same inventory


def test_a_corrupt_inventory_is_moved_aside_and_reported(tmp_path: Path):
    path = tmp_path / "host.json"
    path.write_text('{"schema": 1, "builds": ')
    warnings = []
    assert load(path, warnings.append) == Inventory.empty()
    assert not path.exists() and len(list(tmp_path.glob("host.json.corrupt-*"))) == 1
    assert "moved aside" in warnings[0]
    path.write_text('{"schema": "one"}')
    load(path, warnings.append)
    assert "schema: expected 1, got 'one'" in warnings[1]


def test_vulkaninfo_runs_only_where_ggml_leaves_a_question():
    from buildmgr.devices.inventory import captures_wanted

    def entry(backends, devices):
        probe = ProbeRecord(True, "", 0.1, "llama-bench", {}, "", tuple(devices))
        return BuildEntry("r", "/p", tuple(backends), probe, probe)

    with_pci = Device("Vulkan0", "Vulkan", 0, "NVIDIA H200", 1, 1, pci_bus_id="0000:00:06.0")
    # nvidia-smi always (it runs beside the probes); vulkaninfo only where ggml leaves a question
    assert captures_wanted({"a": entry(["CPU", "CUDA", "Vulkan"], [with_pci]), "b": entry(["CPU"], [])}) == ["CUDA"]
    no_pci = ["CUDA", "Vulkan"]
    assert captures_wanted({"a": entry(["CPU", "Vulkan"], [LAVAPIPE])}) == no_pci  # is it a CPU driver?
    assert captures_wanted({"a": entry(["CPU", "Vulkan"], [])}) == no_pci  # built ≠ present: why?


def test_one_nvidia_smi_call_gives_the_gpus_and_the_driver():
    from buildmgr.backends.cuda.smi import parse_nvidia_smi_csv

    [gpu] = parse_nvidia_smi_csv("0, NVIDIA H200, GPU-71c943e5, 00000000:00:06.0, 143771 MiB, 580.159.04\n")
    assert (gpu.pci_bus_id, gpu.memory_total_mib, gpu.driver) == ("0000:00:06.0", 143771, "580.159.04")
