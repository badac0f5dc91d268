"""A real Vulkan build, run and probed on Mesa's lavapipe (a CPU Vulkan driver), with the Vulkan headers that
`buildmgr toolchain add vulkan` adds (this Debian 12 host's own are too old; conftest's `vulkan_toolchain`, once a
run), picked by the build itself.

ci/test.sh installs lavapipe and glslc, and sets BUILDMGR_TEST_VULKAN; without it these tests are skipped.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import VULKAN_PROVISIONED, assert_user_error, buildmgr, make_env
from packaging.version import Version

from buildmgr.bench import rows as bench_rows

pytestmark = [
    pytest.mark.compile,
    pytest.mark.configure,
    pytest.mark.network,
    VULKAN_PROVISIONED,
]


@pytest.fixture(scope="module")
def root(vulkan_toolchain) -> Path:
    return vulkan_toolchain["root"]


def env_with(root: Path, **extra: str) -> dict[str, str]:
    env = make_env(root)
    env.pop("GGML_VK_VISIBLE_DEVICES", None)
    env.pop("VULKAN_SDK", None)
    return env | extra


@pytest.fixture(scope="module")
def built(root):
    result = buildmgr(env_with(root, GGML_VK_VISIBLE_DEVICES="0"), "build", "vulkan")
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_the_build_took_the_headers_from_the_added_toolchain(root, built):
    prefix = Path(buildmgr(env_with(root), "which", "vulkan").stdout.strip())
    receipt = json.loads((prefix / "buildmgr-receipt.json").read_text())
    [toolchain] = receipt["toolchains"]
    assert toolchain["id"] == f"vulkan-{receipt['backend_versions']['vulkan-headers']}"
    assert set(toolchain["packages"]) == {"libvulkan-dev", "spirv-headers"}
    assert receipt["host_defines"]["Vulkan_INCLUDE_DIR"].endswith(f"/toolchains/{toolchain['id']}/usr/include")
    assert f"using toolchain {toolchain['id']} (buildmgr toolchain add)" in built.stderr


def test_recipes_says_buildable_with_the_added_toolchain_as_build_takes_it(root, tmp_path, vulkan_toolchain):
    """Issue #35: `recipes` said no (headers too old) while `build` took the added toolchain by itself."""

    def vulkan(env):
        shown = buildmgr(env, "recipes", "--json")
        assert shown.returncode == 0, shown.stderr
        return next(r for r in json.loads(shown.stdout)["recipes"] if r["name"] == "vulkan")

    bare = vulkan(env_with(tmp_path))  # the same host without the toolchain: its own headers are too old
    assert not bare["buildable"] and bare["toolchains"] == []
    added = vulkan(env_with(root))
    assert added["buildable"] and added["toolchains"] == [vulkan_toolchain["id"]], added


def inventory(root: Path, **extra: str) -> dict:
    result = buildmgr(env_with(root, **extra), "devices", "--refresh", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_model_ran_on_lavapipe_during_the_smoke_run(root, built):
    prefix = Path(buildmgr(env_with(root), "which", "vulkan").stdout.strip())
    receipt = json.loads((prefix / "buildmgr-receipt.json").read_text())
    assert receipt["recipe"]["backends"] == ["CPU", "Vulkan"]
    assert receipt["smoke"]["devices"] == ["Vulkan0"]
    on_vulkan = [c for c in receipt["smoke"]["checks"] if c["command"][-2:] == ["-dev", "Vulkan0"]]
    assert on_vulkan and on_vulkan[0]["passed"] and on_vulkan[0]["detail"].startswith("on Vulkan0: pp512")
    assert Version(receipt["backend_versions"]["vulkan-headers"]) >= Version("1.3.272")
    assert "devices this build sees: Vulkan0" in built.stderr


def test_lavapipe_is_named_typed_and_identified_when_made_visible(root, built):
    data = inventory(root, GGML_VK_VISIBLE_DEVICES="0")
    [device] = data["devices"]
    assert device["name"] == "Vulkan0" and device["description"].startswith("llvmpipe (LLVM")
    # ggml's API calls lavapipe a GPU and gives it no PCI id; vulkaninfo's deviceType says it is a CPU driver
    assert (device["source"], device["ggml_type"], device["device_id"]) == ("ggml-api", "gpu", None)
    assert (
        device["type"] == "cpu" and "Vulkan0: ggml reports gpu, but vulkaninfo says it is a CPU driver" in data["notes"]
    )
    assert (device["role_basis"], device["role_reason"]) == ("tool", "vulkaninfo types it cpu")
    assert device["uuid"] and device["physical_id"] == f"uuid:{device['uuid']}"
    assert device["memory_total_mib"] == 2048 and device["caps"]["async"] is True
    assert "GGML_VK_VISIBLE_DEVICES" in device["moves_with"]
    [entry] = data["builds"].values()
    assert entry["probe"]["env"] == {"GGML_VK_VISIBLE_DEVICES": "0"}
    assert (entry["probe"]["method"], entry["probe"]["mismatches"]) == ("ggml-api", [])
    assert entry["default_selection"] == {"Vulkan0": "used"}  # llama.cpp would put layers on the CPU driver
    [card] = data["cards"]
    assert card["names"] == {entry_id: ["Vulkan0"] for entry_id in data["builds"]} and card["role"] == "cpu"


def test_a_preview_under_another_environment_is_fresh_and_stored_nowhere(root, built):
    inventory(root, GGML_VK_VISIBLE_DEVICES="0")
    path = next((root / "data" / "buildmgr" / "inventory").glob("*.json"))
    stored = path.read_bytes()
    result = buildmgr(env_with(root), "devices", "--env", "GGML_VK_VISIBLE_DEVICES=0", "--json")
    assert result.returncode == 0, result.stderr
    assert [d["name"] for d in json.loads(result.stdout)["devices"]] == ["Vulkan0"]
    assert "(not stored)" in result.stderr and path.read_bytes() == stored
    hidden = json.loads(buildmgr(env_with(root), "devices", "--env", "GGML_VK_VISIBLE_DEVICES=", "--json").stdout)
    assert hidden["devices"] == [] and path.read_bytes() == stored


def test_devices_warns_when_the_environment_changed_since_the_probe(root, built):
    inventory(root, GGML_VK_VISIBLE_DEVICES="0")
    result = buildmgr(env_with(root), "devices")
    assert result.returncode == 0
    [warning] = [ln for ln in result.stderr.splitlines() if "probed under another environment" in ln]
    assert "GGML_VK_VISIBLE_DEVICES=0 then, (unset) now" in warning
    assert (
        "probed under another environment"
        not in buildmgr(env_with(root, GGML_VK_VISIBLE_DEVICES="0"), "devices").stderr
    )


def test_without_the_variable_llama_cpp_skips_lavapipe_and_says_why(root, built):
    data = inventory(root)
    [entry] = data["builds"].values()
    assert entry["probe"]["ok"] and entry["probe"]["devices"] == []
    [reason] = entry["absent"]
    assert "Vulkan: built ≠ present" in reason and "CPU-type" in reason and "GGML_VK_VISIBLE_DEVICES=0" in reason
    table = buildmgr(env_with(root), "devices")
    assert "built ≠ present" in table.stdout and "CPU-type" in table.stdout


def test_an_empty_variable_hides_every_vulkan_device(root, built):
    [entry] = inventory(root, GGML_VK_VISIBLE_DEVICES="").get("builds").values()
    assert "set and empty" in entry["absent"][0]


def test_a_crashing_probe_is_recorded_and_the_last_good_result_kept(root, built):
    inventory(root, GGML_VK_VISIBLE_DEVICES="0")
    prefix = Path(buildmgr(env_with(root), "which", "vulkan").stdout.strip())
    library = prefix / "lib" / "libggml-vulkan.so.0"
    aside = library.with_name("moved-aside")
    library.rename(aside)  # the binary can no longer start: the loader fails
    try:
        data = inventory(root, GGML_VK_VISIBLE_DEVICES="0")
    finally:
        aside.rename(library)
    [entry] = data["builds"].values()
    assert not entry["probe"]["ok"] and "exit 127" in entry["probe"]["error"]
    assert "libggml-vulkan.so.0" in entry["probe"]["error"]
    assert [d["name"] for d in entry["last_good"]["devices"]] == ["Vulkan0"]
    assert [d["name"] for d in data["devices"]] == ["Vulkan0"]
    assert any("last probe failed" in note for note in data["notes"])


LAVAPIPE_ROWS = [
    ("-dev Vulkan0", ""),
    ("-dev Vulkan0 -ot ffn=CPU", ""),
    ("-dev Vulkan0 -sm tensor", ""),
    ("-dev Vulkan0 -sm row", "row-split-unsupported"),
    ("-dev none -ot ffn=Vulkan0", "override-outside-devices"),
    ("-dev Vulkan0 -sm none -mg 1", "main-gpu-out-of-range"),
    ("-dev Vulkan1", "invalid-device"),
    ("-dev Vulkan0 -ot ffn=Bogus0", "unknown-buffer-type"),
]


@pytest.mark.parametrize(("flags", "failure"), LAVAPIPE_ROWS)
def test_the_placement_check_predicts_what_llama_bench_does_on_lavapipe(root, built, flags, failure):
    result = buildmgr(
        env_with(root, GGML_VK_VISIBLE_DEVICES="0"),
        "check",
        "vulkan",
        "--verify",
        "--json",
        "--",
        "llama-cli",
        *flags.split(),
    )
    assert result.returncode == (1 if failure else 0), result.stderr
    [test] = json.loads(result.stdout)["tests"]
    assert {f["rule"] for f in test["findings"] if f["severity"] == "error"} == ({failure} if failure else set())
    outcome = test["verify"]
    assert (outcome["result"], outcome["failure"]) == (("known", failure) if failure else ("ran", ""))
    assert outcome["agreement"].startswith("as predicted")


def test_run_check_runs_only_a_placement_that_works(root, built):
    env = env_with(root, GGML_VK_VISIBLE_DEVICES="0")
    refused = buildmgr(env, "run", "vulkan", "--check", "--", "llama-bench", "-dev", "Vulkan1", "--list-devices")
    assert refused.returncode == 1 and "Available devices" not in refused.stdout
    assert "valid names here: Vulkan0" in refused.stderr
    ran = buildmgr(env, "run", "vulkan", "--check", "--", "llama-bench", "-dev", "Vulkan0", "--list-devices")
    assert ran.returncode == 0 and "Vulkan0: llvmpipe" in ran.stdout, ran.stderr


def test_a_model_s_weights_are_placed_from_its_header(root, built):
    from buildmgr.proof.models import tiny_model

    model = tiny_model(root / "cache" / "buildmgr")
    env = env_with(root, GGML_VK_VISIBLE_DEVICES="0")
    result = buildmgr(
        env, "check", "vulkan", "--model", str(model), "--verify", "--json", "--", "llama-cli", "-dev", "Vulkan0"
    )
    [test] = json.loads(result.stdout)["tests"]
    assert result.returncode == 0 and test["findings"] == [] and test["verify"]["result"] == "ran"
    # where each op ran: all on lavapipe but the token-embedding lookup (llama.cpp keeps the input layer on the CPU)
    covered = test["coverage"]
    assert covered["taken"] and covered["partial"] is None and covered["layers"] == {"Vulkan0": 2}
    for graph in covered["graphs"]:
        on_cpu = {op: d["CPU"] for op, d in graph["ops"].items() if "CPU" in d}
        assert on_cpu == {"GET_ROWS": 1} and graph["ops"]["MUL_MAT"] == {"Vulkan0": graph["ops"]["MUL_MAT"]["Vulkan0"]}
        assert graph["splits"] == 2 and graph["copied_bytes"] > 0 and graph["off_layer_device"] == []
    not_gguf = root / "model.txt"
    not_gguf.write_text("hello")
    assert_user_error(
        buildmgr(env, "check", "vulkan", "--model", str(not_gguf), "--", "llama-cli"), "is not a GGUF model"
    )


def test_the_vulkan_artifact_installs_into_a_fresh_data_dir_and_runs_on_lavapipe(root, built, tmp_path):
    [entry] = json.loads(buildmgr(env_with(root), "matrix", "vulkan", "--format", "github").stdout)["include"]
    assert entry["args"] == ["build", "vulkan"] and entry["setup"] == "vulkan"
    packaged = buildmgr(env_with(root), "package", "vulkan", "-o", str(tmp_path / "dist"), "--json")
    assert packaged.returncode == 0, packaged.stderr
    result = json.loads(packaged.stdout)
    archive = Path(result["archive"])
    assert archive.name == entry["artifact"] and "libvulkan.so.1" in result["needed"]
    fresh = env_with(tmp_path / "fresh", GGML_VK_VISIBLE_DEVICES="0")
    installed = buildmgr(fresh, "install-artifact", str(archive), "--json")
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["devices"] == ["Vulkan0"]
    prefix = Path(buildmgr(fresh, "which", "vulkan").stdout.strip())
    receipt = json.loads((prefix / "buildmgr-receipt.json").read_text())
    assert receipt["installed_from"]["smoke"]["devices"] == ["Vulkan0"] and receipt["installed_from"]["smoke"]["passed"]


def test_install_from_proves_the_pick_sees_its_device_and_removes_one_that_does_not(root, built, tmp_path):
    """Without GGML_VK_VISIBLE_DEVICES, llama.cpp skips lavapipe: the Vulkan artifact installs and smoke-runs (on the
    CPU), and its proof finds no Vulkan device, so it is removed again: never a silent CPU run."""
    packaged = json.loads(buildmgr(env_with(root), "package", "vulkan", "-o", str(tmp_path / "dist"), "--json").stdout)
    repo = tmp_path / "repo"
    assert buildmgr(env_with(root), "publish", packaged["archive"], "--to", str(repo)).returncode == 0
    blind = env_with(tmp_path / "blind")
    dry = json.loads(buildmgr(blind, "install", "--from", str(repo), "--allow-unsigned", "--dry-run", "--json").stdout)
    assert [(c["tier"], c["proves"]) for c in dry["candidates"]] == [("portable", ["Vulkan"])]
    refused = buildmgr(blind, "install", "--from", str(repo), "--allow-unsigned", "--json")
    assert refused.returncode == 1, refused.stderr
    [attempt] = json.loads(refused.stdout)["attempts"]
    assert attempt["outcome"] == "installed, but it sees no Vulkan device here: removed again"
    assert json.loads(buildmgr(blind, "list", "--json").stdout)["builds"] == []
    seeing = env_with(tmp_path / "seeing", GGML_VK_VISIBLE_DEVICES="0")
    installed = buildmgr(seeing, "install", "--from", str(repo), "--allow-unsigned", "--json")
    assert installed.returncode == 0, installed.stderr
    [attempt] = json.loads(installed.stdout)["attempts"]
    assert attempt["outcome"] == "installed" and attempt["devices"] == ["Vulkan0"] and attempt["signed_by"] is None


def test_a_fresh_build_tree_takes_every_shader_from_the_shader_cache(root, built):
    """The first build compiled each shader variant and stored it, or found it stored (the suite keeps one shader
    cache, like its ccache, in ~/.cache/buildmgr-tests: a cold machine compiles them all, a warm one none); either
    way a rebuild in a new tree compiles none, and its files are byte-identical and still run on lavapipe."""
    prefix = Path(buildmgr(env_with(root), "which", "vulkan").stdout.strip())
    first = json.loads((prefix / "buildmgr-receipt.json").read_text())
    variants = first["shader_cache"]["miss"] + first["shader_cache"]["hit"]
    assert variants > 1000
    shutil.rmtree(root / "cache" / "buildmgr" / "build-trees" / first["id"])
    rebuilt = buildmgr(env_with(root, GGML_VK_VISIBLE_DEVICES="0"), "build", "vulkan", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    second = json.loads((prefix / "buildmgr-receipt.json").read_text())
    assert second["shader_cache"] == first["shader_cache"] | {"hit": variants, "miss": 0}
    assert second["files"] == first["files"]
    assert second["smoke"]["devices"] == ["Vulkan0"] and second["smoke"]["passed"]


def test_a_shader_cache_that_cannot_be_written_is_one_line_before_configuring(root, tmp_path):
    """BUILDMGR_SHADER_CACHE under a file: refused when the build's first writes are made, not as a shader compile
    failing in the middle of the build; no build tree is made."""
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    trees = root / "cache" / "buildmgr" / "build-trees"
    before = sorted(trees.glob("*"))
    env = env_with(root, BUILDMGR_SHADER_CACHE=str(blocker / "shaders"))
    result = buildmgr(env, "build", "vulkan", "-D", "GGML_VULKAN_DEBUG=OFF", "--configure-only")
    # the toolchain's note, then one error line
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"buildmgr: error: cannot write to {blocker / 'shaders'} (Not a directory); "
        "set BUILDMGR_SHADER_CACHE to a writable directory, or unset it"
    )
    assert sorted(trees.glob("*")) == before


def head_size_12_model(path: Path) -> Path:
    """A llama whose attention heads are 12 wide: ggml-vulkan's FLASH_ATTN_EXT takes head sizes that are multiples of 8
    only (supports_op at the pin), so with -fa on the scheduler runs attention on the CPU."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from gguf_model import write_model

    write_model(path, embd=96, ff=192, layers=2, vocab=256, ctx=1024, dtype="f32", heads=8, kv_heads=4)
    return path


def test_coverage_names_the_op_lavapipe_cannot_run_and_bench_calls_that_config_partial(root, built):
    model = head_size_12_model(root / "hs12.gguf")
    env = env_with(root, GGML_VK_VISIBLE_DEVICES="0")
    flags = ["--", "llama-cli", "-dev", "Vulkan0", "-fa", "on"]
    result = buildmgr(env, "check", "vulkan", "--model", str(model), "--json", *flags)
    [test] = json.loads(result.stdout)["tests"]
    assert result.returncode == 0 and test["placement"]["flash_attn"] == "on", result.stderr
    covered = test["coverage"]
    cause = "Vulkan0 does not run FLASH_ATTN_EXT on these operands: a type, head size or shape its kernels do not cover"
    assert covered["partial"] == f"FLASH_ATTN_EXT ×2 on CPU ({cause})"
    for graph in covered["graphs"]:
        assert graph["ops"]["FLASH_ATTN_EXT"] == {"CPU": 2}
        [off] = graph["off_layer_device"]
        assert (off["op"], off["device"], off["layer_device"], off["layers"]) == (
            "FLASH_ATTN_EXT",
            "CPU",
            "Vulkan0",
            [0, 1],
        )
        assert graph["splits"] == 2 + 2 * 2  # into the CPU and back, in each layer
    decode = covered["graphs"][1]
    assert decode["copied_bytes_per_token"] > 64 * 1024  # the KV cache crosses to the CPU for every token
    without = buildmgr(env, "check", "vulkan", "--model", str(model), "--json", *flags[:-2])
    found_without = json.loads(without.stdout)["tests"][0]["coverage"]
    assert found_without["partial"] is None  # -fa auto: llama.cpp turns it off, after laying the KV cache out for it
    assert found_without["flash_attn_auto"] is False
    # what the user put on the CPU is no fallback: the KV cache (-nkvo), the feed-forward (-ot) and what it feeds
    kept = buildmgr(env, "check", "vulkan", "--model", str(model), "--json", *flags, "-nkvo")
    assert json.loads(kept.stdout)["tests"][0]["coverage"]["partial"] is None, kept.stdout
    moved = buildmgr(env, "check", "vulkan", "--model", str(model), "--json", *flags, "-ot", "ffn_.*=CPU")
    graphs = json.loads(moved.stdout)["tests"][0]["coverage"]["graphs"]
    assert {o["op"] for g in graphs for o in g["off_layer_device"]} == {"FLASH_ATTN_EXT"}, moved.stdout
    assert graphs[1]["ops"]["SWIGLU"] == {"CPU": 2}  # decode runs them beside their CPU weights (prefill offloads)

    args = ["-m", str(model), "--depth", "0", "-p", "32", "-n", "8", "--no-pg", "--runs", "1", "-r", "2", "--json"]
    benched = buildmgr(env, "bench", *args, "vk-fa=vulkan -dev Vulkan0 -fa on", "vk=vulkan -dev Vulkan0")
    assert benched.returncode == 0, benched.stderr
    found = json.loads(benched.stdout)
    by_config = {r["buildmgr"]["config"]: r["buildmgr"] for r in found["rows"] if r["n_gen"]}
    assert by_config["vk-fa"]["validity"] == "partial"
    assert by_config["vk-fa"]["evidence"][0] == f"partial: FLASH_ATTN_EXT ×2 on CPU ({cause})"
    assert by_config["vk-fa"]["coverage"]["graphs"]["decode"]["off_layer_device"][0]["count"] == 2
    assert by_config["vk"]["validity"] != "partial" and by_config["vk"]["coverage"]["partial"] is None
    assert f"vk-fa is partial: FLASH_ATTN_EXT ×2 on CPU ({cause})" in found["verdicts"]
    assert "vk-fa: coverage: FLASH_ATTN_EXT ×2 on CPU" in benched.stderr
    # vk's -fa auto was resolved off after llama.cpp had laid the KV cache out for FlashAttention: said; vk-fa forced it
    assert [n.split(":")[0] for n in found["notes"] if "-fa auto turned FlashAttention off" in n] == ["vk"]
    for written in (found["file"], found["samples"]):  # the module's bench tests read <data>/bench as theirs alone
        Path(written).unlink()


def test_a_router_sent_to_the_cpu_takes_its_routing_along_and_coverage_calls_none_of_it_a_fallback(root, built):
    """llama.cpp's own fit sends a partly offloaded layer's `ffn_(gate|up|gate_up|down).*` to the CPU, the router
    (ffn_gate_inp) with it: the routing that reads the router's results through reshaped views runs there too, by the
    user's placement. Called a fallback, it kept the fit out of tune's race (H100, 2026-12-06)."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from gguf_model import write_model

    model = root / "moe-router.gguf"
    write_model(model, embd=256, ff=128, layers=2, heads=4, kv_heads=2, vocab=512, ctx=512, experts=8, used=2)
    env = env_with(root, GGML_VK_VISIBLE_DEVICES="0")
    fit_like = r"blk\.0\.ffn_(gate|up|gate_up|down).*=CPU"
    result = buildmgr(env, "check", "vulkan", "--model", str(model), "--json", "--", "llama-cli", "-dev", "Vulkan0",
                      "-ot", fit_like)  # fmt: skip
    assert result.returncode == 0, result.stderr
    covered = json.loads(result.stdout)["tests"][0]["coverage"]
    prefill, decode = covered["graphs"]
    assert decode["ops"]["SUM_ROWS"] == {"CPU": 1, "Vulkan0": 1}  # layer 0's routing on the CPU, layer 1's not
    assert prefill["ops"]["SUM_ROWS"] == {"Vulkan0": 2}  # a batch of 512 takes the CPU's weights to the device
    assert prefill["off_layer_device"] == decode["off_layer_device"] == [], result.stdout
    assert covered["partial"] is None


def test_tune_never_races_a_placement_whose_ops_fall_back_to_the_cpu(root, built):
    """On the head-size-12 model lavapipe runs FlashAttention on the CPU: tune's `-fa 1` candidate is left out with
    that cause before anything races, and the winner is one whose ops all run where it says."""
    model = head_size_12_model(root / "hs12-tune.gguf")
    env = env_with(root, GGML_VK_VISIBLE_DEVICES="0")
    args = ["-m", str(model), "-p", "32", "-n", "8", "--max-runs", "2", "--no-serve", "--allow-busy", "--json"]
    result = buildmgr(env, "tune", "vulkan", *args)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    by_label = {c["label"]: c for c in plan["candidates"]}
    [first] = {label[: -len(" fa1")] for label in by_label if label.endswith(" fa1")}  # stage 1's winner
    assert first in ("fit", "Vulkan0") and set(by_label) == {"fit", "Vulkan0", f"{first} fa1", f"{first} fa0"}
    fell = by_label[f"{first} fa1"]
    assert fell["state"] == "not run" and fell["processes"] == 0
    assert fell["reason"].startswith("falls back: FLASH_ATTN_EXT ×2 on CPU (Vulkan0 does not run FLASH_ATTN_EXT")
    assert plan["winner"]["label"] in ("fit", "Vulkan0", f"{first} fa0") and plan["winner"]["validity"] != "partial"
    assert (
        "-fa" not in plan["winner"]["flags"] or plan["winner"]["flags"][plan["winner"]["flags"].index("-fa") + 1] == "0"
    )


# --- bench: a cpu and a lavapipe placement measured side by side -----------------------------------------------------

BENCH_CONFIGS = (
    "cpu=vulkan -dev none",
    "vk=vulkan -dev Vulkan0",
    "vk-ngl0=vulkan -dev Vulkan0 -ngl 0",  # the weights stay on the CPU: a fallback, from the load log
    "broken=vulkan -dev Vulkan0 -fa off -ctv q4_0",  # llama.cpp cannot make this context: the run fails
    "row=vulkan -dev Vulkan0 -sm row",  # the placement check's certain failure: reported, never run
)


@pytest.fixture(scope="module")
def benched(root, built):
    """A 24 MB random-weight model (bench/gguf_model.py): decode phases of tens of ms on 2 cores, sampled every 10 ms
    (lavapipe compiles each pipeline with LLVM once, into the suite's Mesa cache: conftest.TEST_MESA_CACHE)."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
    from gguf_model import write_model

    model = root / "medium.gguf"
    write_model(model, embd=256, ff=768, layers=6, vocab=2000, ctx=1024, dtype="f32")
    env = env_with(root, GGML_VK_VISIBLE_DEVICES="0")
    args = [
        "-m",
        str(model),
        "--depth",
        "0,64",
        "-p",
        "64",
        "-n",
        "32",
        "--no-pg",
        "--runs",
        "2",
        "-r",
        "3",
        "--interval",
        "0.01",
    ]
    result = buildmgr(env, "bench", *args, "--json", "--plot", str(root / "bench.png"), *BENCH_CONFIGS)
    assert result.returncode == 1, result.stderr  # the broken CONFIG failed; the others went on
    return json.loads(result.stdout)


def test_bench_runs_each_config_at_each_depth_interleaved_and_keeps_every_sample(root, benched):
    made = benched["rows"]
    shapes = [(64, 0, 0), (0, 32, 0), (64, 0, 64), (0, 32, 64)]
    configs = [c.split("=")[0] for c in BENCH_CONFIGS]
    assert [(r["buildmgr"]["config"], r["n_prompt"], r["n_gen"], r["n_depth"]) for r in made] == [
        (c, *shape) for c in configs for shape in shapes
    ]
    for row in made:
        state = row["buildmgr"]
        if state["config"] == "row":
            assert state["validity"] == "not run" and state["evidence"][0].startswith("error: -sm row")
            continue
        if state["config"] == "broken":
            assert state["validity"] == "failed" and row["avg_ts"] is None
            assert any("failed to create context" in line for line in state["failures"][0]["tail"])
            continue
        # two processes of -r 3: each one's first repetition kept apart, the other two are its steady state; and the
        # warm-up process before them, all three of its repetitions kept apart (issue #48: a cold first process)
        assert [len(run) for run in state["runs_ts"]] == [2, 2] and len(state["first_ts"]) == 2
        assert len(state["warmup_ts"]) == 3 and not set(state["warmup_ts"]) & set(row["samples_ts"])
        assert row["samples_ts"] == [v for run in state["runs_ts"] for v in run]
        assert row["avg_ts"] == pytest.approx(sum(row["samples_ts"]) / 4, rel=1e-3)
        assert [t["round"] for t in state["timing"]] == [0, 1, 2] and all(t["load_s"] >= 0 for t in state["timing"])
        if state["config"] == "vk":  # the cpu's load of 24 MB may end inside the reader's 5 ms: read together, 0 s
            assert all(t["load_s"] > 0 for t in state["timing"])
        assert state["runs"] == 2
        assert state["host"]["cpu_gbs"] > 0 and state["host"]["cards"] == []
        if row["n_gen"]:  # the decode's bound: every byte the CPU side reads per token at the measured bandwidth
            assert state["limit_percent"] > 0 and state["limit_ts"] > 0
    with gzip.open(benched["samples"], "rt") as handle:
        order = [(run["config"], run["round"]) for run in map(json.loads, handle)]
    # a warm-up round first, then interleaved (A B C A B C); the failed CONFIG (at its warm-up) not run again
    assert order == [(c, r) for r in (0, 1, 2) for c in configs[:-1] if r == 0 or c != "broken"]


def test_bench_proves_which_device_worked_and_flags_the_fallback(root, benched):
    by_config: dict[str, set] = {}
    for row in benched["rows"]:
        by_config.setdefault(row["buildmgr"]["config"], set()).add(row["buildmgr"]["validity"])
    assert by_config["vk-ngl0"] == {"invalid: fallback"}
    assert "invalid: fallback" not in by_config["cpu"] | by_config["vk"]
    vk = next(r for r in benched["rows"] if r["buildmgr"]["config"] == "vk" and r["n_gen"] and not r["n_prompt"])
    worked = {(w["device"], w["verdict"]) for w in vk["buildmgr"]["engine"]}
    # lavapipe runs on the CPU: judged by the process's CPU time, over the phase or (a short one) over its test
    assert {device for device, _ in worked} == {"Vulkan0"}
    assert {w["verdict"] for w in vk["buildmgr"]["engine"]} <= {"worked", "worked over the test"}
    assert vk["buildmgr"]["host_memory"]["load_log"]["buffers_mib"]["Vulkan0"]["model"] > 20
    assert vk["buildmgr"]["devices"] == {"Vulkan0": None}
    assert any(line.startswith("tg32 @ d64: ") for line in benched["verdicts"])
    assert (root / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_rows_read_back_by_compare_and_by_upstream_s_script(root, benched, tmp_path):
    env = env_with(root)
    # every rows file of the bench folder, as the README's glob takes them: the samples file is no *.jsonl
    every = sorted(str(p) for p in Path(benched["file"]).parent.glob("*.jsonl"))
    assert every == [benched["file"]] and benched["samples"].endswith(".samples.jsonl.gz")
    compared = buildmgr(env, "bench", "--compare", *every, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    medians = {(e["test"], e["config"]): e["median_ts"] for e in json.loads(compared.stdout)}
    for row in (r for r in benched["rows"] if r["samples_ts"]):
        median = row["buildmgr"]["summary"]["median"]  # rounded to 4 places in the row
        assert medians[(bench_rows.test_name(row), row["buildmgr"]["config"])] == pytest.approx(median, abs=1e-4)
    # upstream's own comparison script, from the pinned source: one CONFIG's rows, the commit against itself
    [script] = (root / "data" / "buildmgr" / "sources").glob("llama.cpp-*/scripts/compare-llama-bench.py")
    vk = tmp_path / "vk.jsonl"
    with open(benched["file"]) as handle:
        vk.write_text("".join(line for line in handle if json.loads(line)["buildmgr"]["config"] == "vk"))
    commit = benched["rows"][0]["build_commit"]
    ran = subprocess.run(
        [sys.executable, str(script), "-t", "llama-bench", "-i", str(vk), "-b", commit, "-c", commit],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    shown = sorted(
        float(line.split("|")[-3])
        for line in ran.stdout.splitlines()
        if line.count("|") > 5 and "t/s" not in line and ":--" not in line
    )
    ours = sorted(round(json.loads(line)["avg_ts"], 2) for line in vk.read_text().splitlines())
    assert shown == ours


def test_a_model_server_running_refuses_the_bench_in_one_line_and_nothing_is_written(root, built, tmp_path):
    """A real process named llama-server (a copy of sleep): the host is busy, and bench says so before any run."""
    server = tmp_path / "llama-server"
    shutil.copy(shutil.which("sleep"), server)
    running = subprocess.Popen([str(server), "60"])
    try:
        from buildmgr.proof.models import tiny_model

        model = tiny_model(root / "cache" / "buildmgr")  # its context of 256 drops depth 4096
        results = root / "data" / "buildmgr" / "bench"
        before = sorted(results.iterdir()) if results.exists() else []
        result = buildmgr(env_with(root), "bench", "-m", str(model), "-p", "64", "-n", "16", "vulkan -dev none")
    finally:
        running.kill()
        running.wait()
    assert_user_error(result, f"llama-server (pid {running.pid}) is running", "--allow-busy")
    assert (sorted(results.iterdir()) if results.exists() else []) == before
