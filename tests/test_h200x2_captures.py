"""Captures from a host with two identical H200s (docs/real-runs.md): the API probe ties every name to its card."""

import json
from pathlib import Path

from conftest import buildmgr, captured

from buildmgr.backends.cuda.smi import parse_nvidia_smi_csv
from buildmgr.backends.vulkan.info import parse_vulkaninfo_summary
from buildmgr.core.device_records import Selection, State
from buildmgr.core.proc import Ran
from buildmgr.devices.captures import parse_list_devices
from buildmgr.devices.identity import default_selection, resolve
from buildmgr.devices.probe import api_devices, cross_check

HOST = Path(__file__).parent / "fixtures" / "h200x2"


def api(name: str):
    devices, error = api_devices(Ran(0, (HOST / name).read_text(), "", 1.0))
    assert error == ""
    return devices


def tools():
    return captured(
        parse_nvidia_smi_csv((HOST / "nvidia-smi.csv").read_text()),
        parse_vulkaninfo_summary((HOST / "vulkaninfo-summary.txt").read_text()),
    )


def cards(devices):
    return {d.name: d.physical_id for d in devices}


def test_each_cuda_name_pairs_with_exactly_one_vulkan_name_by_pci_id():
    devices, notes = resolve(api("api.json"), tools())
    assert cards(devices) == {
        "CUDA0": "pci:0000:00:06.0",
        "CUDA1": "pci:0000:00:07.0",
        "Vulkan0": "pci:0000:00:06.0",
        "Vulkan1": "pci:0000:00:07.0",
    }
    uuids = {d.name: d.uuid for d in devices}
    assert uuids["CUDA0"] == uuids["Vulkan0"] == "71c943e5-c268-3f79-850f-48701a95f51b"
    assert uuids["CUDA1"] == uuids["Vulkan1"] == "a8aa677b-36cc-d9ad-4d4c-1acddb6a4b55"
    assert {d.type for d in devices} == {"gpu"}
    assert not any("pairing unknown" in n for n in notes)


def test_under_the_second_card_environment_the_names_follow_the_card():
    devices, _ = resolve(api("api-second-card.json"), tools())
    assert cards(devices) == {"CUDA0": "pci:0000:00:07.0", "Vulkan0": "pci:0000:00:07.0"}


def test_the_api_and_list_devices_agree_on_that_host():
    for suffix in ("", "-second-card"):
        listed = parse_list_devices((HOST / f"list-devices{suffix}.txt").read_text())
        assert cross_check(api(f"api{suffix}.json"), listed) == ()


def test_llama_cpp_would_use_each_card_once_through_cuda():
    chosen = default_selection(api("api.json"))
    assert [name for name, selection in chosen.items() if selection.used] == ["CUDA0", "CUDA1"]
    assert chosen["Vulkan0"] == Selection(State.SKIPPED, "same device id as CUDA0")
    assert chosen["Vulkan1"] == Selection(State.SKIPPED, "same device id as CUDA1")


def test_text_alone_cannot_pair_twins_and_says_so(tmp_env):
    result = buildmgr(
        tmp_env,
        "devices",
        "--parse",
        str(HOST / "list-devices.txt"),
        "--nvidia-smi",
        str(HOST / "nvidia-smi.csv"),
        "--vulkaninfo",
        str(HOST / "vulkaninfo-summary.txt"),
        "--json",
    )
    data = json.loads(result.stdout)
    assert len({d["physical_id"] for d in data["devices"]}) == 4  # twins never merged
    assert any("pairing unknown" in n and "PCI ids from ggml's API" in n for n in data["notes"])
