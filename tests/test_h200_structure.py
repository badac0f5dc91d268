"""What the structure step's code did on a lent H200 (2026-12-01, bench/recorders/gpu-structure.sh, docs/real-runs.md): the
captures are checked against what the code says today, from the same inputs."""

import json
from pathlib import Path

from buildmgr.backends.cuda import device_code as cuda_device_code
from buildmgr.devices import identity
from buildmgr.devices.inventory import build_devices
from buildmgr.devices.inventory_file import Inventory
from buildmgr.placement.check import Here, check
from buildmgr.placement.syntax import parse
from buildmgr.store.receipt import Receipt

RUN = Path(__file__).parent / "fixtures" / "h200" / "structure"


def recorded_checks() -> list[dict]:
    text, decoder, found = (RUN / "check.jsonl").read_text(), json.JSONDecoder(), []
    position = 0
    while text[position:].strip():
        report, length = decoder.raw_decode(text[position:].lstrip())
        position = len(text) - len(text[position:].lstrip()) + length
        found.append(report)
    return found


def test_each_placement_the_h200_ran_is_predicted_from_its_stored_devices_today():
    inventory = Inventory.from_text((RUN / "devices.json").read_text())
    reports = recorded_checks()
    assert len(reports) == 4
    for report in reports:
        devices = build_devices(inventory, report["build"])
        receipt = Receipt.from_text((RUN / "cuda-vulkan-sm90.receipt.json").read_text())
        here = Here(tuple(devices), identity.default_selection(devices), receipt.source.commit or "")
        [test] = report["tests"]
        [placement], _ = parse("llama-cli", test["flags"].split(), {})
        found = check(placement, here)
        assert [f.rule for f in found] == [f["rule"] for f in test["findings"]], test["flags"]
        predicted = [f.rule for f in found if f.severity == "error"]  # today's prediction against that real run
        ran = test["verify"]
        assert (ran["result"], ran["failure"]) == (("known", predicted[0]) if predicted else ("ran", "")), test


def test_the_jit_warning_install_artifact_printed_there_is_what_the_check_says_today():
    receipt = Receipt.from_text((RUN / "cuda-sm80.receipt.json").read_text())
    code = receipt.runtime.device_code["CUDA"]
    assert code == ("sm_80", "compute_80") and "sm_80" in (RUN / "cuobjdump-cuda-sm80.txt").read_text()
    capability = (RUN / "gpus.txt").read_text().splitlines()[1].split(", ")[1]  # what nvidia-smi said there
    [warning] = cuda_device_code.kernel_findings(code, [capability])
    assert json.loads((RUN / "install-cuda-sm80.json").read_text())["warnings"] == [warning.text()]


def test_one_card_under_two_names_is_one_row_with_both_names():
    """The rows are computed again from the builds' stored devices and nvidia-smi's GPUs there, not read back: one
    card, both names, nvidia-smi's UUID matched; and what the H200 stored is what the code makes today."""
    import dataclasses

    from buildmgr.backends.cuda.smi import NvidiaGpu
    from buildmgr.devices.inventory import summarize

    stored = Inventory.from_text((RUN / "devices.json").read_text())
    gpus = [NvidiaGpu(**gpu) for gpu in json.loads((RUN / "devices.json").read_text())["host"]["nvidia_gpus"]]
    bare = dataclasses.replace(stored, cards=(), devices=())
    computed = summarize(bare, {"CUDA": gpus})
    [card] = computed.cards
    assert card.pci_bus_id == "0000:00:06.0" and card.members == ("CUDA0", "Vulkan0")
    assert card.names["cuda+vulkan-sm90-41bf9c78"] == ("CUDA0", "Vulkan0") and card.uuid == gpus[0].uuid
    assert computed.cards == stored.cards
    apart = summarize(bare, {})  # without nvidia-smi the PCI ids from ggml's API still tie the two names
    assert [c.members for c in apart.cards] == [("CUDA0", "Vulkan0")] and apart.cards[0].uuid is None
