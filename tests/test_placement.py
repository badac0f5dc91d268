"""Placement flags read as llama.cpp reads them, and checked against the two-H200 host's real devices.

Every row of TABLE ran on that host (tests/fixtures/h200x2/placement.txt, docs/real-runs.md); the check must
predict each outcome.
"""

import re
from pathlib import Path

import pytest

from buildmgr.core.errors import UserError
from buildmgr.core.proc import Ran
from buildmgr.devices.identity import assign_physical_ids, default_selection
from buildmgr.devices.probe import api_devices
from buildmgr.placement.check import Here, check, cpu_overrides, memory_findings, suggest, weights_per_device
from buildmgr.placement.syntax import Placement, bench_args, describe, parse, parse_bench, parse_common
from buildmgr.placement.verify import classify

HOST = Path(__file__).parent / "fixtures" / "h200x2"
PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"


def h200x2(environment: str = "") -> Here:
    devices, _ = api_devices(Ran(0, (HOST / f"api{environment}.json").read_text(), "", 1.0))
    devices, _ = assign_physical_ids(devices)
    return Here(tuple(devices), default_selection(devices), PIN, free_mib={d.name: d.memory_free_mib for d in devices})


def observed_rows() -> list[tuple[str, str | None]]:
    """(flags, the failure llama-bench showed or None) for every row run on that host."""
    rows = []
    for line in (HOST / "placement-check.md").read_text().splitlines():
        flags, _, observed, _ = (cell.strip() for cell in line.strip("|").split("|"))
        known = re.match(r"known: ([\w-]+)", observed)
        rows.append((flags.strip("`"), known.group(1) if known else None if observed.startswith("ran") else "unknown"))
    return rows


TABLE = observed_rows()


def test_the_table_holds_every_row_that_ran_there():
    rows = (Path(__file__).parent.parent / "bench" / "recorders" / "placement-rows.txt").read_text().splitlines()
    assert [flags for flags, _ in TABLE] == rows


@pytest.mark.parametrize(("flags", "failure"), TABLE)
def test_every_outcome_observed_on_two_h200s_is_predicted(flags, failure):
    [placement], notes = parse("llama-cli", flags.split(), {})
    errors = {f.rule for f in check(placement, h200x2()) if f.severity == "error"}
    assert errors == ({failure} if failure else set()) and notes == []


def test_one_card_under_two_names_is_a_warning_with_the_fix():
    [placement], _ = parse("llama-cli", ["-dev", "CUDA0,Vulkan0", "-sm", "layer"], {})
    [finding] = check(placement, h200x2())
    assert (finding.severity, finding.rule) == ("warning", "one-card-twice")
    assert "pci:0000:00:06.0" in finding.message and finding.fix == "keep one of CUDA0 and Vulkan0"


def test_an_unknown_name_lists_the_valid_ones():
    [placement], _ = parse("llama-cli", ["-dev", "CUDA2"], {})
    [finding] = check(placement, h200x2())
    assert finding.fix == "valid names here: CUDA0, CUDA1, Vulkan0, Vulkan1"


def test_an_equals_form_is_one_error_and_places_nothing_in_either_syntax():
    """Issue #35: `--device=Vulkan0` was also read as a device, a second line for '--device=Vulkan0 Vulkan0'; and
    llama-bench's `--device=X`, which it stops at too, was 'placement ok'."""
    for tool in ("llama-cli", "llama-bench"):
        [placement], notes = parse(tool, ["--device=CUDA2", "-m", "x.gguf"], {})
        assert [(n.rule, n.subject, n.fix) for n in notes] == [
            ("no-equals-form", "--device=CUDA2", "write --device CUDA2")
        ]
        assert placement.devices is None and check(placement, h200x2()) == []


def test_overrides_onto_a_device_outside_the_model_say_which_abort_and_what_works():
    [placement], _ = parse("llama-cli", ["-dev", "CUDA0,CUDA1", "-sm", "none", "-ot", "ffn=CUDA1"], {})
    [finding] = check(placement, h200x2())
    assert (finding.severity, finding.rule, finding.subject) == ("error", "override-outside-devices", "-ot ffn=CUDA1")
    assert finding.fix.startswith("override onto CUDA0 or CPU")  # with -sm none, only the main device holds it


def test_without_dev_the_model_gets_llama_cpp_s_default_devices():
    [placement], _ = parse("llama-cli", ["-ot", "ffn=Vulkan1"], {})
    [finding] = check(placement, h200x2())  # default: CUDA0, CUDA1; Vulkan1 is CUDA1's second name, skipped
    assert finding.rule == "override-outside-devices" and "(CUDA0, CUDA1)" in finding.message


def test_a_name_that_moved_to_another_card_is_reported():
    here = h200x2("-second-card")
    moved = Here(here.devices, here.default, PIN, {"CUDA0": "pci:0000:00:06.0"})
    [placement], _ = parse("llama-cli", ["-dev", "CUDA0"], {})
    [finding] = check(placement, moved)
    assert "CUDA0 is pci:0000:00:07.0 under the current environment, but was pci:0000:00:06.0" in finding.message


def test_flags_are_read_as_llama_cpp_reads_them():
    environ = {"LLAMA_ARG_DEVICE": "CUDA1", "LLAMA_ARG_SPLIT_MODE": "none", "LLAMA_ARG_OVERRIDE_TENSOR": "exps=CPU"}
    placement, notes = parse_common(["--device", "CUDA0,CUDA1", "--split_mode", "layer", "-ot", "ffn=CUDA1"], environ)
    assert placement.devices == ("CUDA0", "CUDA1") and placement.split_mode == "layer"  # the command line wins
    assert placement.overrides == (("exps", "CPU"), ("ffn", "CUDA1"))  # both apply
    assert placement.flag("devices") == "--device" and notes == []
    from_env, _ = parse_common([], environ)
    assert (from_env.devices, from_env.split_mode, from_env.flag("devices")) == (("CUDA1",), "none", "LLAMA_ARG_DEVICE")
    _, notes = parse_common(["--device=CUDA0", "-m", "x.gguf"], {})
    assert notes[0].rule == "no-equals-form" and notes[0].fix == "write --device CUDA0"
    assert parse_common(["-dev", "none"], {})[0].devices == ()
    assert parse_common(["-ngl", "99", "--cpu-moe", "-ncmoe", "3"], {})[0].n_cpu_moe == 3


def test_llama_bench_reads_commas_as_tests_and_slashes_as_devices_together():
    placements, notes = parse_bench(["-dev", "CUDA0,CUDA1", "-sm", "layer,none"])
    assert [(p.devices, p.split_mode) for p in placements] == [
        (("CUDA0",), "layer"),
        (("CUDA0",), "none"),
        (("CUDA1",), "layer"),
        (("CUDA1",), "none"),
    ]
    assert notes[0].rule == "bench-comma" and notes[0].fix == "to use them together write -dev CUDA0/CUDA1"
    [together], notes = parse_bench(["-dev", "CUDA0/CUDA1", "-ts", "3/1", "-ot", "a=CPU;b=CUDA1"])
    assert together.devices == ("CUDA0", "CUDA1") and together.tensor_split == (3.0, 1.0) and notes == []
    assert together.overrides == (("a", "CPU"), ("b", "CUDA1"))
    [again], _ = parse_bench(bench_args(together))  # written in llama-bench's syntax, it reads back as itself
    assert again == together
    common, _ = parse_common(describe(together).split(), {})  # and in llama-cli's
    assert (common.devices, common.tensor_split, common.overrides) == (
        together.devices,
        together.tensor_split,
        together.overrides,
    )
    assert bench_args(together) == [
        "-dev",
        "CUDA0/CUDA1",
        "-sm",
        "layer",
        "-mg",
        "0",
        "-ts",
        "3/1",
        "-ot",
        "a=CPU;b=CUDA1",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-ot", "ffn(=CPU"], "not a valid regular expression"),
        (["-ot", "ffn"], "needs PATTERN=BUFFER_TYPE"),
        (["-ts", "3,x"], "every entry must be a number"),
        (["-sm", "rows"], "one of none, layer, row, tensor"),
        (["-mg", "first"], "must be a whole number"),
        (["-ngl", "abc"], "a number, 'auto' or 'all'"),  # issue #35: was 'placement ok'; llama.cpp fails (stoi)
    ],
)
def test_malformed_values_are_user_errors(args, message):
    with pytest.raises(UserError, match=message):
        parse_common(args, {})


@pytest.mark.parametrize("value", ["99", "-1", "0", "auto", "all", "12abc"])  # stoi reads "12abc" as 12
def test_gpu_layers_llama_cpp_takes_are_taken(value):
    assert parse_common(["-ngl", value], {})[0].gpu_layers == value


def test_captured_failures_are_classified():
    text = (HOST / "placement.txt").read_text()
    blocks = {b.split("\n", 1)[0]: b for b in text.split("### ")[1:]}

    def outcome(label: str) -> str:
        block = next(b for head, b in blocks.items() if head.endswith(label))
        code = int(block.split("exit ", 1)[1].split()[0])
        result = classify(code, block)
        return result.failure or result.result

    assert outcome("-ngl 99 -dev CUDA0,CUDA1 -sm row") == "row-split-unsupported"
    assert outcome("-ngl 99 -dev CUDA0,CUDA1 -sm tensor") == "tensor-split-unsupported"
    assert outcome("-ngl 99 -dev CUDA0,CUDA1 -sm none -mg 2") == "main-gpu-out-of-range"
    assert outcome("-ngl 99 -dev CUDA2") == "invalid-device"
    assert outcome("-ngl 99 -dev CUDA0 -ot ffn=Bogus0") == "unknown-buffer-type"
    assert outcome("-ngl 99 -dev CUDA0,CUDA1 -sm layer") == "ran"
    assert (
        classify(
            134,
            "ggml-backend.cpp:941: pre-allocated tensor (blk.0.ffn_down.weight) in a buffer (CUDA1) that cannot run the operation (NONE)",
        ).failure
        == "override-outside-devices"
    )


def test_suggest_uses_each_card_once_discrete_first():
    here = h200x2()
    suggestion = suggest(list(here.devices), here.default, "dgpu")
    assert suggestion.devices == ("CUDA0", "CUDA1") and suggestion.tensor_split == (1, 1)
    assert suggestion.flags() == "-dev CUDA0,CUDA1 -ts 1,1"
    [placement], _ = parse("llama-cli", suggestion.flags().split(), {})  # what it prints reads back as itself
    assert placement.devices == suggestion.devices and check(placement, here) == []


def test_weights_per_device_from_the_gguf_header(tmp_path):
    from buildmgr.proof.models import write_tiny_model

    model = tmp_path / "tiny.gguf"
    write_tiny_model(model)
    here = h200x2()
    layered = weights_per_device(Placement(devices=("CUDA0", "CUDA1")), model, here, ["CUDA0", "CUDA1"])
    offloaded = weights_per_device(
        Placement(devices=("CUDA0", "CUDA1"), overrides=(("ffn", "CPU"),)), model, here, ["CUDA0", "CUDA1"]
    )
    assert sum(layered.values()) == sum(offloaded.values()) == _weight_bytes(model)  # every tensor placed once
    assert layered["CUDA0"] > 0 and layered["CUDA1"] > 0 and offloaded["CPU"] > layered["CPU"]
    one_layer = weights_per_device(Placement(devices=("CUDA0",), gpu_layers="1"), model, here, ["CUDA0"])
    assert one_layer["CUDA0"] * 2 == layered["CUDA0"] + layered["CUDA1"] - _output_bytes(model)  # 1 of 2 layers
    small = Here(here.devices, here.default, PIN, free_mib={"CUDA0": 0, "CUDA1": 0}, host_free_mib=1 << 20)
    assert {f.subject for f in memory_findings(layered, small)} == {"CUDA0", "CUDA1"}
    with pytest.raises(UserError, match="is not a GGUF model"):
        (tmp_path / "bad.gguf").write_text("not a model")
        weights_per_device(Placement(), tmp_path / "bad.gguf", here, ["CUDA0"])


def _output_bytes(model: Path) -> int:
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(str(model)).tensors if t.name.startswith("output"))


def test_cpu_moe_keeps_expert_tensors_on_the_cpu():
    assert cpu_overrides(Placement(cpu_moe=True)) == ((r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),)
    [(pattern, target)] = cpu_overrides(Placement(n_cpu_moe=1))
    assert target == "CPU"
    assert re.search(pattern, "blk.0.ffn_up_exps.weight") and not re.search(pattern, "blk.1.ffn_up_exps.weight")


def _weight_bytes(model: Path) -> int:
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(str(model)).tensors)


def test_a_build_of_another_commit_gets_the_rules_with_their_caveat():
    here = h200x2()
    older = Here(here.devices, here.default, "b5e0f1a2c3", free_mib=here.free_mib)
    [placement], _ = parse("llama-cli", ["-dev", "CUDA0,Vulkan1", "-sm", "layer"], {})
    [note] = check(placement, older)
    assert (note.severity, note.rule) == ("note", "cross-backend-layer") and "this build is b5e0f1a" in note.message
    assert check(placement, here) == []
    [placement], _ = parse("llama-cli", ["-dev", "CUDA0", "-sm", "tensor"], {})
    [error] = check(placement, older)
    assert error.message.endswith("(seen at 0c1e570; this build is b5e0f1a: --verify)")


# Rules whose real run kept only the abort's backtrace (the message went to the part of stderr the capture lost): the
# line they match is the one llama.cpp at the pin prints from this format string (test_cpu_build checks it there).
LINES_AT_THE_PIN = {
    "override-outside-devices": (
        "ggml/src/ggml-backend.cpp",
        "pre-allocated tensor (%s) in a buffer (%s) that cannot run the operation (%s)",
        ("blk.0.ffn_up.weight", "CUDA1", "MUL_MAT"),
    ),
    # the RPC client's abort when its server died under it (the H100's server aborted in fattn.cu, issue #68)
    "remote-op-unsupported": (
        "ggml/src/ggml-rpc/ggml-rpc.cpp",
        "Remote RPC server crashed or returned malformed response",
        (),
    ),
}


def test_every_placement_rule_matches_a_line_llama_cpp_really_printed():
    """Each rule's signature against what the two-H200 runs printed (fixtures/h200x2/placement.txt), so a rule whose
    pattern matches nothing llama.cpp says fails here, not silently on a user's run."""
    from buildmgr.placement.rules import RULES

    printed = (Path(__file__).parent / "fixtures" / "h200x2" / "placement.txt").read_text()
    unmatched = [r.id for r in RULES if r.id not in LINES_AT_THE_PIN and not r.signature.found_in(printed)]
    assert unmatched == []
    by_id = {r.id: r for r in RULES}
    for rule_id, (_, text, values) in LINES_AT_THE_PIN.items():
        assert by_id[rule_id].signature.found_in(text % values), rule_id


def test_two_virtual_devices_of_one_card_are_warned_about_as_one_card():
    """GGML_CUDA_DEVICES=2 on one H200 (fixtures/h200/virtual34): -dev CUDA0,CUDA1 runs on one card."""
    from buildmgr.devices.inventory import moved_names

    records = (Path(__file__).parent / "fixtures" / "h200" / "virtual34" / "api-virtual.json").read_text()
    devices, _ = api_devices(Ran(0, records, "", 1.0))
    devices, _ = assign_physical_ids(devices)
    stored = {d.name: d for d in h200x2().devices}  # stored without the variable: CUDA0 on 0000:00:06.0 …
    moved = moved_names(stored, devices)
    assert moved == {"CUDA1": "pci:0000:00:07.0"}  # … and CUDA1 on another card, which it no longer is
    here = Here(tuple(devices), default_selection(devices), PIN, moved)
    [placement], _ = parse("llama-cli", ["-dev", "CUDA0,CUDA1", "-sm", "layer"], {})
    moved_warning, finding = check(placement, here)  # CUDA0, still a share of its card, has not moved
    assert "CUDA1 is pci:0000:00:06.0 under the current environment, but was pci:0000:00:07.0" in moved_warning.message
    assert (finding.severity, finding.rule) == ("warning", "one-card-twice")
    assert "two virtual devices of one card (pci:0000:00:06.0" in finding.message
    assert "GGML_CUDA_DEVICES" in finding.message and finding.fix == "keep one of CUDA0 and CUDA1"


def test_wording_never_contradicts_the_flags_given():
    """Issue #52: `-sm none -mg 3` was told "llama.cpp checks it only with -sm none"; `-dev none/CUDA0` was told that
    none is not a device and to use -dev none."""
    nothing = Here((), {}, "0c1e570")
    [placement], _ = parse("llama-cli", ["-sm", "none", "-mg", "3"], {})
    [finding] = check(placement, nothing)
    assert "-sm none" not in finding.message and "no main GPU to pick" in finding.message
    placements, _ = parse("llama-bench", ["-dev", "none/CUDA0"], {})
    [none] = check(placements[0], h200x2())
    assert none.rule == "invalid-device" and none.fix == "write -dev none, or leave none out of the list (CUDA0)"


def test_a_remote_device_under_fa_auto_is_warned_of_as_the_h100_server_aborted():
    """Issue #68 on an H100 (tests/fixtures/h100/rpc68/second): `-dev RPC0` with -fa left to auto crashed the server
    (fattn.cu 'fatal error': its build has no FlashAttention kernels, and ggml-rpc's client claims every op for the
    remote device); with -fa 0 it ran. The check warns of the first and says nothing of the second."""
    import json

    from buildmgr.core.device_records import Device
    from buildmgr.placement import rules

    run = Path(__file__).parent / "fixtures" / "h100" / "rpc68" / "second"
    [build] = json.loads((run / "devices.json").read_text())["builds"].values()
    devices, _ = assign_physical_ids([Device.from_json(d) for d in build["probe"]["devices"]])
    here = Here(tuple(devices), default_selection(devices), PIN)
    endpoint = json.loads((run / "serve.json").read_text())["endpoint"]
    for fa, outcome in (("auto", "crashed"), ("0", "ran")):
        checked = json.loads((run / f"check-fa{fa}.json").read_text())["tests"][0]
        assert checked["verify"]["result"] == outcome
        args = ["-rpc", endpoint, "-dev", "RPC0", *(["-fa", fa] if fa != "auto" else [])]
        [placement], _ = parse_bench(args)
        assert placement.servers == (endpoint,)
        warned = [f for f in check(placement, here) if f.rule == rules.REMOTE_OP]
        assert bool(warned) == (outcome == "crashed"), warned
        assert describe(placement).startswith(f"--rpc {endpoint} -dev RPC0")  # the servers before the names


def test_a_remote_device_named_before_its_server_is_added_is_refused_as_llama_cpp_refuses_it():
    """llama.cpp looks a -dev name up as it reads it (common/arg.cpp; llama-bench's parse_devices_arg), and adds a
    server's devices as it reads --rpc; its variables come first, in the order it defines the options (--rpc before
    -dev). So RPC0 before --rpc is 'invalid device'; after it, or with the servers in LLAMA_ARG_RPC, it is a name."""
    import json

    from buildmgr.core.device_records import Device

    run = Path(__file__).parent / "fixtures" / "h100" / "rpc68" / "second"
    [build] = json.loads((run / "devices.json").read_text())["builds"].values()
    devices, _ = assign_physical_ids([Device.from_json(d) for d in build["probe"]["devices"]])
    here = Here(tuple(devices), default_selection(devices), PIN)
    endpoint = "127.0.0.1:50052"

    def refused(args: list[str], environ: dict[str, str] | None = None, bench: bool = False) -> list[str]:
        placement = parse_bench(args)[0][0] if bench else parse_common(args, environ or {})[0]
        return [f.subject for f in check(placement, here) if f.rule == "invalid-device"]

    assert refused(["-dev", "RPC0", "--rpc", endpoint, "-fa", "off"]) == ["-dev RPC0"]
    assert refused(["--rpc", endpoint, "-dev", "RPC0", "-fa", "off"]) == []
    assert refused(["--rpc", endpoint, "-fa", "off"], {"LLAMA_ARG_DEVICE": "RPC0"}) == ["LLAMA_ARG_DEVICE RPC0"]
    assert refused(["-dev", "RPC0", "-fa", "off"], {"LLAMA_ARG_RPC": endpoint}) == []
    assert refused(["-dev", "CUDA0", "--rpc", endpoint]) == []  # a local name is a name before any server
    assert refused(["-dev", "RPC0", "-rpc", endpoint, "-fa", "0"], bench=True) == ["-dev RPC0"]
    twice, _ = parse_common(["--rpc", endpoint, "--rpc", "127.0.0.1:50053"], {})
    assert twice.servers == (endpoint, "127.0.0.1:50053")  # each --rpc adds its servers, as llama.cpp's does
