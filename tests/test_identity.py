import json
from pathlib import Path

from conftest import captured

from buildmgr.backends.cuda.smi import NvidiaGpu, parse_nvidia_smi_csv
from buildmgr.backends.vulkan.info import VulkanGpu, parse_vulkaninfo_summary
from buildmgr.devices.captures import parse_list_devices
from buildmgr.devices.identity import resolve
from buildmgr.devices.inventory import absence_reasons

FIXTURES = Path(__file__).parent / "fixtures"


def by_name(devices):
    return {d.name: d for d in devices}


def test_h200_cuda0_and_vulkan0_are_one_card_by_name_and_memory():
    devices, notes = resolve(parse_list_devices((FIXTURES / "h200" / "list-devices.txt").read_text()), {})
    d = by_name(devices)
    assert d["CUDA0"].physical_id == d["Vulkan0"].physical_id  # 143155 vs 143771 MiB: within 5 %
    assert "CUDA0 ≡ Vulkan0 by description and memory only (no hardware id for both)" in notes


def test_h200_with_nvidia_smi_gets_the_pci_id_as_identity():
    nvidia = parse_nvidia_smi_csv((FIXTURES / "h200" / "nvidia-smi.csv").read_text())
    devices, _ = resolve(parse_list_devices((FIXTURES / "h200" / "list-devices.txt").read_text()), captured(nvidia))
    d = by_name(devices)
    assert d["CUDA0"].physical_id == d["Vulkan0"].physical_id == "pci:0000:00:06.0"
    assert d["CUDA0"].uuid == "1fdea520-81c5-69c8-0529-9a5edbbe6109"


def test_uuid_from_both_tools_pairs_cuda_and_vulkan():
    listed = parse_list_devices(
        "Available devices:\n  CUDA0: NVIDIA A100 (40000 MiB, 1 MiB free)\n"
        "  Vulkan0: NVIDIA A100 (81000 MiB, 1 MiB free)\n"
    )  # memory disagrees
    nvidia = [NvidiaGpu(0, "NVIDIA A100", "aaaa", "00:01.0", 40000)]
    vulkan = [VulkanGpu(0, "NVIDIA A100", "gpu", "aaaa")]
    d = by_name(resolve(listed, captured(nvidia, vulkan))[0])
    assert d["CUDA0"].physical_id == d["Vulkan0"].physical_id == "pci:00:01.0"
    assert d["Vulkan0"].uuid == "aaaa"


def test_two_identical_cards_are_never_merged_and_the_pairing_is_unknown():
    listed = parse_list_devices("""Available devices:
  CUDA0: NVIDIA GeForce RTX 3090 (24124 MiB, 23000 MiB free)
  CUDA1: NVIDIA GeForce RTX 3090 (24124 MiB, 23000 MiB free)
  Vulkan0: NVIDIA GeForce RTX 3090 (24576 MiB, 23000 MiB free)
  Vulkan1: NVIDIA GeForce RTX 3090 (24576 MiB, 23000 MiB free)
""")
    devices, notes = resolve(listed, {})
    ids = [d.physical_id for d in devices]
    assert len(set(ids)) == 4
    assert any("pairing unknown" in n and "CUDA0" in n and "Vulkan1" in n for n in notes)


def test_identical_cards_that_no_tool_can_tie_stay_apart():
    listed = parse_list_devices("""Available devices:
  CUDA0: NVIDIA GeForce RTX 3090 (24124 MiB, 1 MiB free)
  CUDA1: NVIDIA GeForce RTX 3090 (24124 MiB, 1 MiB free)
  Vulkan0: NVIDIA GeForce RTX 3090 (24576 MiB, 1 MiB free)
  Vulkan1: NVIDIA GeForce RTX 3090 (24576 MiB, 1 MiB free)
""")
    vulkan = [VulkanGpu(0, "x", "gpu", "bbbb"), VulkanGpu(1, "x", "gpu", "aaaa")]
    # vulkaninfo names differ from llama.cpp's here, so only nvidia-smi ties CUDA devices; no guess is made
    devices, _ = resolve(
        listed,
        captured(
            [
                NvidiaGpu(0, "NVIDIA GeForce RTX 3090", "aaaa", "01", 24576),
                NvidiaGpu(1, "NVIDIA GeForce RTX 3090", "bbbb", "02", 24576),
            ],
            vulkan,
        ),
    )
    d = by_name(devices)
    assert d["CUDA0"].physical_id != d["CUDA1"].physical_id
    assert len({x.physical_id for x in devices}) == 4


def test_apu_igpu_is_named_and_rocm_alias_shares_its_type():
    listed = parse_list_devices("""Available devices:
  ROCm0: AMD Radeon Graphics (65536 MiB, 60000 MiB free)
  Vulkan0: NVIDIA GeForce RTX 4090 (24564 MiB, 23000 MiB free)
  Vulkan1: AMD Radeon Graphics (RADV GFX1151) (65536 MiB, 61234 MiB free)
""")
    vulkan = [
        VulkanGpu(0, "NVIDIA GeForce RTX 4090", "gpu", "cccc"),
        VulkanGpu(1, "AMD Radeon Graphics (RADV GFX1151)", "igpu", "dddd"),
    ]
    devices, notes = resolve(listed, captured(vulkan=vulkan))
    d = by_name(devices)
    assert d["Vulkan1"].type == d["ROCm0"].type == "igpu"
    assert d["ROCm0"].physical_id == d["Vulkan1"].physical_id != d["Vulkan0"].physical_id
    assert "iGPU = Vulkan1 (AMD Radeon Graphics (RADV GFX1151))" in notes


def test_same_backend_never_shares_even_with_a_repeated_uuid():
    listed = parse_list_devices(
        "Available devices:\n  Vulkan0: X (100 MiB, 1 MiB free)\n  Vulkan1: X (100 MiB, 1 MiB free)\n"
    )
    devices, _ = resolve(listed, captured(vulkan=[VulkanGpu(0, "Y", "gpu", "same"), VulkanGpu(1, "Z", "gpu", "same")]))
    assert devices[0].physical_id != devices[1].physical_id


def test_lavapipe_absence_is_explained():
    vulkan = parse_vulkaninfo_summary((FIXTURES / "lavapipe-vulkaninfo-summary.txt").read_text())
    [reason] = absence_reasons(["CPU", "Vulkan"], set(), {}, captured(vulkan=vulkan))
    assert "built ≠ present" in reason and "CPU-type (llvmpipe" in reason and "GGML_VK_VISIBLE_DEVICES=0" in reason
    [hidden] = absence_reasons(["CPU", "Vulkan"], set(), {"GGML_VK_VISIBLE_DEVICES": ""}, captured(vulkan=vulkan))
    assert "set and empty" in hidden
    [cuda] = absence_reasons(["CPU", "CUDA"], set(), {}, captured(vulkan=vulkan))
    assert "no NVIDIA GPU visible" in cuda
    assert absence_reasons(["CPU", "CUDA"], set(), {"CUDA_VISIBLE_DEVICES": ""}, captured(vulkan=[]))[0].endswith(
        "CUDA_VISIBLE_DEVICES hides every CUDA device"
    )
    assert absence_reasons(["CPU", "Vulkan"], {"Vulkan"}, {}, captured(vulkan=vulkan)) == []


def test_twins_with_one_ambiguous_vulkaninfo_row_never_share_an_id():
    """Two H200s under Vulkan, but the vulkaninfo capture shows one (taken under another environment)."""
    listed = parse_list_devices(
        "Available devices:\n  Vulkan0: NVIDIA H200 (143771 MiB, 1 MiB free)\n"
        "  Vulkan1: NVIDIA H200 (143771 MiB, 1 MiB free)\n"
    )
    devices, _ = resolve(listed, captured(vulkan=[VulkanGpu(0, "NVIDIA H200", "gpu", "1fdea520")]))
    assert devices[0].physical_id != devices[1].physical_id
    assert devices[0].uuid is None and devices[1].uuid is None  # one row cannot be two cards
    nvidia = [NvidiaGpu(0, "NVIDIA H200", "1fdea520", "0000:00:06.0", 143771)]
    cuda = parse_list_devices(
        "Available devices:\n  CUDA0: NVIDIA H200 (143155 MiB, 1 MiB free)\n  CUDA1: NVIDIA H200 (143155 MiB, 1 MiB free)\n"
    )
    devices, _ = resolve(cuda, captured(nvidia))
    assert devices[0].physical_id != devices[1].physical_id and devices[0].uuid is None


# --- ggml-cuda's virtual devices (GGML_CUDA_DEVICES=2 on one H200, captured there: fixtures/h200/virtual34) ---
VIRTUAL = FIXTURES / "h200" / "virtual34"


def test_virtual_cuda_devices_from_ggml_s_api_are_one_card_with_the_vulkan_name_of_it():
    from buildmgr.core.device_records import Device

    stored = json.loads((VIRTUAL / "devices-virtual.json").read_text())["builds"]
    cuda = [Device.from_json(d) for d in stored["cuda-sm90-fb9bbb95"]["probe"]["devices"]]
    vulkan = [Device.from_json(d) for d in stored["vulkan-920b84e2"]["probe"]["devices"]]
    devices, notes = resolve(cuda + vulkan, {})
    d = by_name(devices)
    assert d["CUDA0"].physical_id == d["CUDA1"].physical_id == d["Vulkan0"].physical_id == "pci:0000:00:06.0"
    assert "CUDA0, CUDA1 are virtual devices of one card (pci:0000:00:06.0)" in " ".join(notes)
    assert not any("equal discrete cards" in n for n in notes)


def test_virtual_cuda_devices_from_list_devices_are_one_card_by_their_tag():
    devices, notes = resolve(parse_list_devices((VIRTUAL / "list-devices-virtual.txt").read_text()), {})
    d = by_name(devices)
    assert d["CUDA0"].physical_id == d["CUDA1"].physical_id != ""
    assert "CUDA0, CUDA1 are virtual devices of one card" in " ".join(notes)


def test_two_real_identical_cards_stay_two():
    text = (
        "Available devices:\n  CUDA0: NVIDIA H200 (143155 MiB, 142612 MiB free)\n"
        "  CUDA1: NVIDIA H200 (143155 MiB, 142612 MiB free)\n"
    )
    d = by_name(resolve(parse_list_devices(text), {})[0])
    assert d["CUDA0"].physical_id != d["CUDA1"].physical_id


def test_the_h200_s_inventory_under_virtual_devices_is_one_card_of_three_names():
    """`devices --env GGML_CUDA_DEVICES=2 --json` as the H200 printed it before virtual devices were known: read
    again, it is one card (not three), with the card's own description, PCI id and memory."""
    from buildmgr.devices.inventory import summarize
    from buildmgr.devices.inventory_file import Inventory

    inventory = summarize(Inventory.from_json(json.loads((VIRTUAL / "devices-virtual.json").read_text())), {})
    [card] = inventory.cards
    assert (card.description, card.pci_bus_id) == ("NVIDIA H200", "0000:00:06.0")
    assert card.memory_total_mib == {"CUDA": 143154, "Vulkan": 143771}  # the two shares of 71577 MiB, summed
    assert card.names["cuda-sm90-fb9bbb95"] == ("CUDA0", "CUDA1") and card.names["vulkan-920b84e2"] == ("Vulkan0",)
    assert card.default["cuda-sm90-fb9bbb95"] == "CUDA0,CUDA1"  # llama.cpp uses both without -dev
    assert not any("equal discrete cards" in note for note in inventory.notes)


def test_virtual_devices_and_the_vulkan_name_of_their_card_pair_by_the_card_s_memory():
    """cuda+vulkan's --list-devices under GGML_CUDA_DEVICES=2 on the H200: two shares of 71577 MiB are the card
    Vulkan0 reports with 143771 MiB (within 5 %); one half alone would not be."""
    devices, notes = resolve(parse_list_devices((VIRTUAL / "list-devices-cuda-vulkan-virtual.txt").read_text()), {})
    d = by_name(devices)
    assert d["CUDA0"].physical_id == d["CUDA1"].physical_id == d["Vulkan0"].physical_id
    assert not any(n.startswith("pairing unknown") for n in notes)


def test_one_card_seen_through_two_drivers_pairs_without_memory():
    """h200/list-devices.txt's start-up lines alone (this project's H200): CUDA0 `NVIDIA H200` with its VRAM, Vulkan0
    `NVIDIA H200` through the `NVIDIA` Vulkan driver, no memory: one name, two drivers, paired (and said so)."""
    from buildmgr.devices.captures import read_text

    lines = (FIXTURES / "h200" / "list-devices.txt").read_text().split("Available devices:")[0]
    parsed = read_text(lines).devices
    assert [(d.name, d.description, d.driver) for d in parsed] == [
        ("CUDA0", "NVIDIA H200", None),
        ("Vulkan0", "NVIDIA H200", "NVIDIA"),
    ]
    devices, notes = resolve(list(parsed), {})
    d = by_name(devices)
    assert d["CUDA0"].physical_id == d["Vulkan0"].physical_id
    assert "CUDA0 ≡ Vulkan0 by description and memory only (no hardware id for both)" in notes
