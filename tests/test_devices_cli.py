"""`buildmgr devices --parse`: captured output from any host → the SPEC's device JSON."""

import json
from pathlib import Path

from conftest import assert_user_error, buildmgr

H200 = Path(__file__).parent / "fixtures" / "h200"
LAVAPIPE = Path(__file__).parent / "fixtures" / "lavapipe-vulkaninfo-summary.txt"
CONTRACT_KEYS = {
    "name",
    "backend",
    "index",
    "description",
    "memory_total_mib",
    "memory_free_mib",
    "type",
    "physical_id",
}


def test_h200_capture_parses_to_the_contract(tmp_env):
    result = buildmgr(
        tmp_env,
        "devices",
        "--parse",
        str(H200 / "list-devices.txt"),
        "--nvidia-smi",
        str(H200 / "nvidia-smi.csv"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    assert all(CONTRACT_KEYS <= set(d) for d in devices)
    cuda, vulkan = devices
    assert (cuda["name"], cuda["memory_total_mib"], cuda["memory_free_mib"]) == ("CUDA0", 143155, 142612)
    assert (vulkan["name"], vulkan["memory_total_mib"]) == ("Vulkan0", 143771)
    assert cuda["physical_id"] == vulkan["physical_id"] == "pci:0000:00:06.0"
    assert cuda["uuid"] == "1fdea520-81c5-69c8-0529-9a5edbbe6109"


def test_table_names_both_aliases(tmp_env):
    result = buildmgr(tmp_env, "devices", "--parse", str(H200 / "list-devices.txt"))
    assert result.returncode == 0 and "NVIDIA H200 (CUDA0, Vulkan0)" in result.stdout


def test_vulkaninfo_capture_types_the_device(tmp_path, tmp_env):
    listed = tmp_path / "list.txt"
    listed.write_text("Available devices:\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)\n")
    result = buildmgr(tmp_env, "devices", "--parse", str(listed), "--vulkaninfo", str(LAVAPIPE), "--json")
    [device] = json.loads(result.stdout)["devices"]
    assert device["type"] == "cpu" and device["uuid"] == "6d657361-3232-2e33-2e36-000000000000"


def test_files_without_a_device_block_or_missing_are_user_errors(tmp_path, tmp_env):
    assert_user_error(
        buildmgr(tmp_env, "devices", "--parse", str(H200 / "nvidia-smi.csv"), "--json"),
        "no llama.cpp or ggml log lines",
    )
    assert_user_error(buildmgr(tmp_env, "devices", "--parse", str(tmp_path / "nope.txt")), "cannot read --parse file")
    assert_user_error(
        buildmgr(tmp_env, "devices", "--parse", str(H200 / "list-devices.txt"), "--suggest"), "a capture has no builds"
    )
    assert not (tmp_path / "data").exists()


def test_env_preview_takes_only_enumeration_variables(tmp_path, tmp_env):
    assert_user_error(
        buildmgr(tmp_env, "devices", "--env", "PATH=/tmp"), "--env takes NAME=VALUE", "CUDA_VISIBLE_DEVICES"
    )
    assert_user_error(buildmgr(tmp_env, "devices", "--env", "CUDA_VISIBLE_DEVICES"), "got 'CUDA_VISIBLE_DEVICES'")
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


def test_every_capture_variant_parses_through_the_cli(tmp_env):
    captures = Path(__file__).parent / "fixtures" / "captures"
    for capture in sorted(captures.glob("*.txt")):
        result = buildmgr(tmp_env, "devices", "--parse", str(capture), "--json")
        assert result.returncode == 0, (capture.name, result.stderr)
        shown = json.loads(result.stdout)
        assert shown["devices"] or shown["notes"][0].startswith("no devices: "), capture.name


def test_parse_of_an_empty_log_prints_what_it_saw_and_writes_nothing(tmp_path, tmp_env):
    capture = Path(__file__).parent / "fixtures" / "captures" / "vulkan-no-devices.txt"
    result = buildmgr(tmp_env, "devices", "--parse", str(capture))
    assert result.returncode == 0, result.stderr
    assert "no devices in that text" in result.stdout and "ggml_vulkan: No devices found." in result.stdout
    assert not (tmp_path / "data").exists()


def test_parse_of_a_pasted_log_groups_dozen_with_its_card(tmp_env):
    capture = Path(__file__).parent / "fixtures" / "captures" / "dozen-beside-native-2024.txt"
    shown = json.loads(buildmgr(tmp_env, "devices", "--parse", str(capture), "--json").stdout)
    assert len({d["physical_id"] for d in shown["devices"]}) == 1 and shown["shapes"] == ["ggml_vulkan lines"]
    assert any("grouped by name" in note for note in shown["notes"])


def test_parse_reads_stdin_and_refuses_a_directory_and_stray_options(tmp_path, tmp_env):
    """Issue #35: `--parse -` is stdin; options that need another one are refused, never ignored."""
    import subprocess
    import sys

    text = (H200 / "list-devices.txt").read_text()
    piped = subprocess.run(
        [sys.executable, "-m", "buildmgr", "devices", "--parse", "-", "--json"],
        input=text,
        env=tmp_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert piped.returncode == 0, piped.stderr
    assert [d["name"] for d in json.loads(piped.stdout)["devices"]] == ["CUDA0", "Vulkan0"]
    assert_user_error(buildmgr(tmp_env, "devices", "--parse", str(tmp_path)), "is a directory")
    assert_user_error(buildmgr(tmp_env, "devices", "--nvidia-smi", str(H200 / "nvidia-smi.csv")), "goes with --parse")
    assert_user_error(buildmgr(tmp_env, "devices", "--prefer", "igpu"), "--prefer goes with --suggest")


def test_abbreviated_flags_are_refused(tmp_env):
    """Issue #35: argparse's prefix matching made `build --reb` a --rebuild."""
    assert_user_error(buildmgr(tmp_env, "build", "--reb"), "--reb")
    assert_user_error(buildmgr(tmp_env, "devices", "--ref"), "--ref")


def test_piped_tables_are_never_cut_or_folded(tmp_env):
    """Issue #35: `recipes | cat` cut the fix command itself at 80 columns. Piped, every row is one line whole."""
    shown = buildmgr(tmp_env | {"COLUMNS": ""}, "recipes")
    assert shown.returncode == 0, shown.stderr
    sycl = next(line for line in shown.stdout.splitlines() if line.strip().startswith("sycl"))
    assert "`source /opt/intel/oneapi/setvars.sh` first" in sycl
    parsed = buildmgr(
        tmp_env,
        "devices",
        "--parse",
        str(Path(__file__).parent / "fixtures" / "captures" / "vulkan-intel-bmg-g21-arc-pro-b50.txt"),
    )
    assert "Intel(R) Graphics (BMG G21) (Vulkan0)" in parsed.stdout


def test_source_options_of_the_other_action_are_refused(tmp_env):
    """Issue #35: `source show --archive F` and `source sync --json` ignored them without a word."""
    assert_user_error(buildmgr(tmp_env, "source", "show", "--vendor"), "go with sync")
    assert_user_error(buildmgr(tmp_env, "source", "show", "--archive", "x.tar.gz"), "go with sync")
    assert_user_error(buildmgr(tmp_env, "source", "sync", "--json"), "--json goes with show")


def test_a_mistyped_option_gets_the_close_one_and_its_command_s_help(tmp_env):
    """Issue #35: `check cpu --verfy -- …` said the tool's command goes after '--'; help pointers differed."""
    assert_user_error(buildmgr(tmp_env, "check", "cpu", "--verfy", "--", "llama-cli"), "did you mean --verify?")
    assert_user_error(buildmgr(tmp_env, "build", "--rebiuld"), "did you mean --rebuild?", "'buildmgr build --help'")
    assert_user_error(buildmgr(tmp_env, "bench", "--bogus"), "--bogus", "'buildmgr bench --help'")
    assert_user_error(buildmgr(tmp_env, "check", "cpu", "-dev", "CUDA0"), "goes after '--'")


def test_every_argument_of_every_command_says_what_it_is_and_the_usage_fits_80_columns(tmp_env):
    """Issue #35: `--json` of check and devices and the positional BUILD/TOOL/action had no help text; the top
    usage line listed every command in braces, 145 characters."""
    import argparse

    from buildmgr.cli import parser

    def silent(p: argparse.ArgumentParser, name: str):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word, child in action.choices.items():
                    yield from silent(child, f"{name} {word}")
            elif not action.help and not isinstance(action, argparse._HelpAction | argparse._VersionAction):
                yield f"{name} {'/'.join(action.option_strings) or action.dest}"

    assert list(silent(parser(None), "buildmgr")) == []
    shown = buildmgr(tmp_env | {"COLUMNS": "80"}, "--help")
    assert shown.returncode == 0
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80, shown.stdout
    assert "install-artifact" in shown.stdout


def test_a_vendor_capture_with_no_gpu_in_it_is_refused_not_ignored(tmp_env, tmp_path):
    """Issue #35: a garbage --vulkaninfo or --nvidia-smi file was accepted, and changed nothing, without a word."""
    garbage = tmp_path / "hostname.txt"
    garbage.write_text("buildhost\n")
    log = str(H200 / "list-devices.txt")
    for option, tool in (("--vulkaninfo", "vulkaninfo --summary"), ("--nvidia-smi", "nvidia-smi --query-gpu=")):
        assert_user_error(
            buildmgr(tmp_env, "devices", "--parse", log, option, str(garbage)), f"{option} {garbage}: no GPU", tool
        )
    assert buildmgr(tmp_env, "devices", "--parse", log, "--nvidia-smi", str(H200 / "nvidia-smi.csv")).returncode == 0


def test_a_card_whose_text_gives_only_its_free_memory_shows_that_not_a_question_mark(tmp_env):
    """Issue #35: memory showed `?` where the log said `11605 MiB free` (ipex-llm#12844's SYCL load log)."""
    capture = Path(__file__).parent / "fixtures" / "captures" / "sycl-b580-0xe20b-using-device.txt"
    shown = buildmgr(tmp_env | {"COLUMNS": ""}, "devices", "--parse", str(capture))
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if "(SYCL0)" in line)
    assert row.rstrip().endswith("11605 MiB free"), row


def test_runs_are_shown_in_the_order_the_text_printed_them(tmp_env):
    """captures51/vulkan-then-rocm-bench-using-2024.txt (llama.cpp#2059): a Vulkan program, then a ROCm one."""
    capture = Path(__file__).parent / "fixtures" / "captures51" / "vulkan-then-rocm-bench-using-2024.txt"
    shown = buildmgr(tmp_env, "devices", "--parse", str(capture))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.index("run 0:") < shown.stdout.index("(Vulkan)") < shown.stdout.index("run 1:")
    assert shown.stdout.index("run 1:") < shown.stdout.index("(ROCm0)")
    listed = json.loads(buildmgr(tmp_env, "devices", "--parse", str(capture), "--json").stdout)["devices"]
    assert [(d["name"], d["run"]) for d in listed] == [("Vulkan", 0), ("ROCm0", 1)]
