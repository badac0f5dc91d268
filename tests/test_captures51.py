"""Issue 51: device lines by construction (the pinned source's format strings), and the parser's share of facts on
real public captures it was not written from (fixtures/captures51/, each file citing its source in its first line)."""

import json
import re
from pathlib import Path

import pytest
from conftest import buildmgr, make_env

from buildmgr.core.errors import UserError
from buildmgr.devices.captures import read_text
from buildmgr.devices.captures.shapes import covered_formats

CAPTURES = Path(__file__).parent / "fixtures" / "captures51"
EXPECTED = json.loads((CAPTURES / "expected.json").read_text())
FIELDS = (
    ("name", "name"),
    ("description", "description"),
    ("total_mib", "memory_total_mib"),
    ("free_mib", "memory_free_mib"),
)


# A C string literal, its adjacent pieces joined; a macro between them (GGML_CUDA_NAME, PRId64) kept as `{NAME}`.
_LITERAL = re.compile(r'((?:"(?:[^"\\\n]|\\.)*"\s*(?:[A-Z][A-Z0-9_]+\s*(?=")|PRI[a-z0-9]+\s*)?)+)')
# What makes a format string a device line: a device's name with its description, its memory, a list's header, or a
# backend's row of one device (ggml's `Device %d: %s`, Vulkan's `%zu = %s (%s)`, SYCL's table, Metal, OpenCL).
DEVICE_LINE = re.compile(
    r"[Dd]evice:? %\w+:? \(%s\)|%[\w{}]+ MiB free|%\w+ MB free|MiB, %zu MiB free|VRAM: %\w+ MiB|mem size: %\w+ MB"
    r"|[Ff]ound %\w+ .*devices|Device %d: %s|Device description: %s|GPU name: +%s|device: '%s|%zu = %s \(%s\)"
    r"|\|%2d\|%19s|%s = %s \+ \(%s|\| %s \| %s   %s|- device %zu: %s \(%s\)"
)
# Found by DEVICE_LINE but naming no device a user needs, each with why.
NOT_DEVICE_LINES = {
    r"  Device %d: %s\n": "ggml-cuda's list of Turing cards without MMA, named again after the init lines",
    r"|%2d|%19s|%7s|\n": "ggml-sycl's optimization-feature table: an ID and a type, no name",
    r"device: %s (%s)\n": "tools/tuning's own listing, a developer tool",
}


@pytest.fixture(scope="module")
def pinned_tree(tmp_path_factory) -> Path:
    """The pinned source, synced for this test by `source sync` (pip, the lock's sha256): never this user's own tree,
    which may hold their edits (issue #67)."""
    env = make_env(tmp_path_factory.mktemp("pin"))
    synced = buildmgr(env, "source", "sync")
    assert synced.returncode == 0, synced.stderr
    return Path(json.loads(buildmgr(env, "source", "show", "--json").stdout)["path"])


def pinned_formats(tree: Path) -> dict[str, str]:
    """Every device line's format string in the pinned tree's C, C++, CUDA and Objective-C sources → where it is."""
    found: dict[str, str] = {}
    for path in sorted(tree.rglob("*")):
        if path.suffix not in (".c", ".cpp", ".cu", ".m") or "vendor" in path.relative_to(tree).parts:
            continue
        text = path.read_text(errors="replace")
        for match in _LITERAL.finditer(text):
            joined = re.sub(r'"\s*([A-Za-z]\w*)\s*"', lambda m: "{" + m.group(1) + "}", match.group(1).strip())
            fmt = joined.strip().removeprefix('"').removesuffix('"')
            if "%" in fmt and DEVICE_LINE.search(fmt):
                found.setdefault(fmt, f"{path.relative_to(tree)}:{text.count(chr(10), 0, match.start()) + 1}")
    return found


@pytest.mark.network
def test_every_device_line_the_pinned_source_prints_has_a_reader(pinned_tree):
    """Issue 51: the device lines come from the source, not from examples; a pin that gains one fails here."""
    found = pinned_formats(pinned_tree)
    covered = covered_formats()
    assert len(found) > 20, "the finder lost the source's device lines"
    missing = {fmt: where for fmt, where in found.items() if fmt not in covered and fmt not in NOT_DEVICE_LINES}
    assert missing == {}, "device lines of the pinned source that no reader covers"
    gone = sorted(set(NOT_DEVICE_LINES) - set(found))
    assert gone == [], "exceptions the pin no longer prints"


def facts(name: str) -> tuple[int, int]:
    """(facts read right, facts in all) of one capture: each non-null field a careful reader wrote down is a fact;
    a value the parser adds where the reader saw none, and a device the reader did not see, each count as one wrong."""
    try:
        devices = list(read_text((CAPTURES / name).read_text()).devices)
    except UserError:
        devices = []
    right = total = 0
    for want in EXPECTED[name]["devices"]:
        # an empty description is none (as an added value below is): a reader's null matches it
        same = [
            d
            for d in devices
            if d.run == want["run"]
            and (d.name == want["name"] if want["name"] else (d.description or None) == want["description"])
        ]
        found = next((d for d in same if (d.description or None) == want["description"]), same[0] if same else None)
        if found is not None:
            devices.remove(found)
        for key, attribute in FIELDS:
            value = getattr(found, attribute) if found is not None else None
            if want[key] is not None:
                total += 1
                right += value == want[key]
            elif value not in (None, ""):
                total += 1
    return right, total + len(devices)


def share() -> tuple[int, int, dict[str, tuple[int, int]]]:
    each = {name: facts(name) for name in sorted(EXPECTED)}
    return sum(r for r, _ in each.values()), sum(t for _, t in each.values()), each


def test_share_of_facts_on_captures51():
    right, total, each = share()
    print(f"captures51: {right} of {total} facts ({right / total:.1%})")
    for name, (r, t) in each.items():
        print(f"  {name}: {r}/{t}")
    # 180 of 201 when written; 197 of 209 with Vulkan's driver apart, runs by program and the two 2024 captures
    # (189 of the first 201): what is left is Ollama's own lines, which are no llama.cpp text
    assert right / total >= 0.94


def read(name: str):
    return [
        (d.name, d.description, d.memory_total_mib, d.memory_free_mib, d.run)
        for d in read_text((CAPTURES / name).read_text()).devices
    ]


def test_sycl_device_table_alone_in_10e6_bytes():
    """sycl-table-iris-xe-then-crash.txt (llama.cpp#9612): the table, then the crash; 31604M is 10^6 bytes."""
    assert read("sycl-table-iris-xe-then-crash.txt") == [("SYCL0", "Intel Iris Xe Graphics", 30140, None, 0)]
    devices = read_text((CAPTURES / "sycl-ls-sycl-device-three-opencl-rows.txt").read_text()).devices
    assert [(d.name, d.memory_total_mib, d.type) for d in devices] == [
        ("SYCL0", 51217, "unknown"),
        ("SYCL1", 64021, "cpu"),  # its row says [opencl:cpu:0]
        ("SYCL2", 64021, "unknown"),
    ]


def test_memory_breakdown_rows_give_total_and_free_and_ggml_s_description_wins():
    """mem-breakdown-*.txt (ollama#16031, llama.cpp#23868, #22673, #15860): the table at exit, printed twice in one
    run, behind a router's `[pid]` and timestamps, and its first 2025 form with a CPU row of its total alone."""
    assert read("mem-breakdown-5090-3090-twice.txt") == [
        ("CUDA0", "RTX 5090", 32606, 30991, 0),
        ("CUDA1", "RTX 3090", 24575, 23332, 0),
    ]
    assert read("mem-breakdown-rpc-rocm-pid-timestamps.txt") == [
        ("RPC0", "10.0.69.2:50052", 122880, 124831, 0),
        ("ROCm0", "8060S Graphics", 122880, 124161, 0),
    ]
    # the fit line prints ggml's whole description; the table's has "NVIDIA " stripped
    assert read("mem-breakdown-wide-laptop-name.txt") == [
        ("CUDA0", "NVIDIA RTX 2000 Ada Generation Laptop GPU", 7807, 7627, 0)
    ]
    assert read("mem-breakdown-old-format-pr15860.txt")[-1] == ("CPU", "EPYC 7742", 515628, None, 0)


def test_musa_init_and_test_backend_ops():
    """musa-eight-flattened-no-indent.txt (MooreThreads/tutorial_on_musa#26) and musa-s80-test-backend-ops.txt
    (llama.cpp#12493): rows without their indent; the header names MUSA."""
    assert [d[:2] for d in read("musa-eight-flattened-no-indent.txt")][3:5] == [
        ("MUSA3", "MTT S4000"),
        ("MUSA4", "MTT S3000"),
    ]
    assert read("musa-s80-test-backend-ops.txt")[0] == ("MUSA0", "MTT S80", 16297, 16292, 0)


def test_rpc_using_device_lines_with_old_names_and_a_hand_edited_one():
    """rpc-old-bracket-names-llama-box.txt (gpustack/llama-box#34), rpc-redacted-endpoints-metal-comment.txt
    (llama.cpp#12385): `RPC[host:port]` names, a line without the space before its description, a note after it."""
    assert read("rpc-old-bracket-names-llama-box.txt")[0] == (
        "RPC[172.20.10.59:50883]",
        "RPC[172.20.10.59:50883]",
        None,
        21805,
        0,
    )
    devices = read("rpc-redacted-endpoints-metal-comment.txt")
    assert ("RPC", "RPC[[ip_address]:50052]", None, 0, 0) in devices
    assert devices[-1] == ("Metal", "Apple M4 Pro", None, 19659, 0)  # "# the main host" is the poster's note
    # llama.cpp prints one `using device` line per device: the two lines redacted alike are two servers
    assert [d for d in devices if d[0] == "RPC"] == [
        ("RPC", "RPC[[ip_address]:50052]", None, 0, 0),
        ("RPC", "RPC[[ip_address]][:50052]", None, 0, 0),
        ("RPC", "RPC[[ip_address]][:50052]", None, 0, 0),
    ]


def test_unknown_backends_are_kept_with_role_unknown():
    """htp-four-sessions-unknown-id.txt (llama.cpp#19617) and cann-register-device-eight-910b3.txt (#15759)."""
    devices = read_text((CAPTURES / "htp-four-sessions-unknown-id.txt").read_text()).devices
    assert next((d.name, d.backend, d.description, d.memory_free_mib, d.type) for d in devices) == (
        "HTP0",
        "HTP",
        "Hexagon",
        2048,
        "unknown",
    )
    assert [d[0] for d in read("cann-register-device-eight-910b3.txt")] == [*(f"CANN{i}" for i in range(8)), "CPU"]


def test_runs_are_kept_apart():
    """Two real captures pasted one after the other (rpc-device-info-router-child-pid.txt, llama.cpp#23858, and
    sycl-device-info-timestamped-aligned.txt, #24996): each device_info list is a run, and both CPUs stay."""
    text = (CAPTURES / "rpc-device-info-router-child-pid.txt").read_text() + (
        CAPTURES / "sycl-device-info-timestamped-aligned.txt"
    ).read_text()
    assert [(d.name, d.run) for d in read_text(text).devices] == [
        ("ROCm0", 0),
        ("CPU", 0),
        ("RPC0", 0),
        ("SYCL0", 1),
        ("CPU", 1),
    ]
    # two-builds-vulkan-then-rocm-8060s.txt (llama.cpp#16095): the ROCm build's header begins run 1, its row was cut
    assert [
        (d.name, d.run) for d in read_text((CAPTURES / "two-builds-vulkan-then-rocm-8060s.txt").read_text()).devices
    ] == [("Vulkan0", 0)]


def test_parse_json_says_the_run():
    [device] = read_text((CAPTURES / "vulkan-rtx5090-nvidia-driver.txt").read_text()).devices
    assert device.to_json()["run"] == 0


CAPTURES19 = Path(__file__).parent / "fixtures" / "captures"


def drivers(text: str):
    return [(d.name, d.description, d.driver) for d in read_text(text).devices]


def test_a_vulkan_init_line_gives_ggml_s_own_description_and_the_driver_apart():
    """Issue 51, kind 5: ggml-vulkan prints `%zu = %s (%s) | uma:` with the device's name (ggml's own description,
    what --list-devices and the API give) and then the driver's; vulkan-rx7900xt-plus-v3dv-pi5.txt
    (geerlingguy/ai-benchmarks#23), vulkan-radv-nested-parens-test-backend-ops.txt (llama.cpp#12015)."""
    assert drivers((CAPTURES / "vulkan-rx7900xt-plus-v3dv-pi5.txt").read_text()) == [
        ("Vulkan0", "AMD Radeon RX 7900 XT (RADV NAVI31)", "radv"),
        ("Vulkan1", "V3D 7.1.10.2", "V3DV Mesa"),
    ]
    # the init line alone says what test-backend-ops' `Device description:` (ggml's) says
    text = (CAPTURES / "vulkan-radv-nested-parens-test-backend-ops.txt").read_text()
    init = "\n".join(line for line in text.splitlines() if line.startswith("ggml_vulkan"))
    assert drivers(init) == drivers(text) == [("Vulkan0", "AMD Radeon (TM) Pro VII (RADV VEGA20)", "radv")]
    # 2024's `VulkanN: NAME (DRIVER) | uma:` (dozen-beside-native-2024.txt, llama.cpp#9516, build 3772)
    assert drivers((CAPTURES19 / "dozen-beside-native-2024.txt").read_text()) == [
        ("Vulkan0", "AMD Radeon RX 6800 XT", "AMD proprietary driver"),
        ("Vulkan1", "Microsoft Direct3D12 (AMD Radeon RX 6800 XT)", "Dozen"),
    ]


def test_a_vulkan_line_of_a_build_before_the_driver_keeps_its_last_parenthesis():
    """`VulkanN: NAME | uma:` printed no driver before build 3135 (llama.cpp 73bac2b, 2024-06-11): there the last
    parenthesis is the name's. vulkan-and-cuda-one-program-main-build-2064.txt (llama.cpp#5321), its card's name
    swapped for a RADV one seen in #2059 ("AMD Radeon RX 580 Series (RADV POLARIS10)"); a build number that cannot
    be a count of llama.cpp's commits for this line (a shallow clone's 1, a tarball's 0) tells nothing."""
    text = (CAPTURES / "vulkan-and-cuda-one-program-main-build-2064.txt").read_text()
    assert drivers(text)[1] == ("Vulkan0", "NVIDIA GeForce RTX 3080", None)
    radv = text.replace("NVIDIA GeForce RTX 3080", "AMD Radeon RX 580 Series (RADV POLARIS10)")
    assert drivers(radv)[1] == ("Vulkan0", "AMD Radeon RX 580 Series (RADV POLARIS10)", None)
    shallow = radv.replace("main: build = 2064 (daa6a9c3)", "main: build = 1 (daa6a9c3)")
    assert drivers(shallow)[1] == ("Vulkan0", "AMD Radeon RX 580 Series", "RADV POLARIS10")


def test_january_2024_s_vulkan_using_line_names_the_device_without_an_index():
    """vulkan-then-rocm-bench-using-2024.txt (llama.cpp#2059): `ggml_vulkan: Using NAME | fp16: …`, before devices had
    indices (GGML_VK_DEVICE chose one): the backend's name alone, unknown stays unknown."""
    [_, vulkan] = read_text((CAPTURES / "vulkan-then-rocm-bench-using-2024.txt").read_text()).devices
    assert (vulkan.name, vulkan.index, vulkan.description, vulkan.driver) == (
        "Vulkan",
        None,
        "AMD Radeon RX 7900 XTX",
        None,
    )


def test_runs_of_two_programs_of_different_backends_are_kept_apart():
    """A program prints its backends' start-up lines, then its load log: vulkan-then-rocm-bench-using-2024.txt
    (llama.cpp#2059) is a Vulkan llama-bench, whose `build: COMMIT (N)` footer is its last line, then a ROCm one."""
    devices = read_text((CAPTURES / "vulkan-then-rocm-bench-using-2024.txt").read_text()).devices
    assert sorted((d.run, d.name) for d in devices) == [(0, "Vulkan"), (1, "ROCm0")]
    # musa-masked-name-using-device.txt (#12419) then load-log-using-device-8060s.txt (GPUOpen-Drivers/AMDVLK#413),
    # pasted one after the other: each prints its start-up lines, then `build: N (COMMIT) with …`, then its load log
    text = (CAPTURES / "musa-masked-name-using-device.txt").read_text() + (
        CAPTURES19 / "load-log-using-device-8060s.txt"
    ).read_text()
    assert [(d.name, d.run) for d in read_text(text).devices] == [("MUSA0", 0), ("Vulkan0", 1)]


def test_one_program_of_two_backends_is_one_run():
    """vulkan-and-cuda-one-program-main-build-2064.txt (llama.cpp#5321): 2024's order, the build line first and each
    backend's start-up lines after it; h200/list-devices.txt (this project's H200): CUDA's and Vulkan's start-up lines,
    then the device list."""
    one = read_text((CAPTURES / "vulkan-and-cuda-one-program-main-build-2064.txt").read_text()).devices
    assert [(d.name, d.description, d.run) for d in one] == [
        ("CUDA0", "NVIDIA GeForce RTX 3090 Ti", 0),
        ("Vulkan0", "NVIDIA GeForce RTX 3080", 0),
    ]
    h200 = read_text((Path(__file__).parent / "fixtures" / "h200" / "list-devices.txt").read_text()).devices
    assert [(d.name, d.driver, d.run) for d in h200] == [("CUDA0", None, 0), ("Vulkan0", "NVIDIA", 0)]


def test_one_server_loading_a_model_four_times_is_one_run_and_another_card_under_the_name_is_another():
    """lavapipe/server-draft-model-four-loads.txt (this project's lavapipe, the pinned llama-server with -md, -v;
    debug lines left out): llama.cpp's fit loads the model twice without weights, then the model, then the draft
    model, and prints `using device Vulkan0 (…)` each time."""
    text = (Path(__file__).parent / "fixtures" / "lavapipe" / "server-draft-model-four-loads.txt").read_text()
    assert text.count("using device Vulkan0") == 4
    assert [(d.name, d.run) for d in read_text(text).devices] == [("Vulkan0", 0), ("CPU", 0)]
    # the same name for another card is another program's log pasted after it
    head, _, last = text.rpartition("using device Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) (unknown id)")
    other = head + "using device Vulkan0 (NVIDIA GeForce RTX 3090) (0000:01:00.0)" + last
    assert {(d.name, d.run) for d in read_text(other).devices if d.name == "Vulkan0"} == {
        ("Vulkan0", 0),
        ("Vulkan0", 1),
    }


def ollama(text: str):
    return [
        (d.name, d.backend, d.index, d.description, d.memory_total_mib, d.memory_free_mib, d.run)
        for d in read_text(text).devices
    ]


def test_ollama_key_value_lines_give_library_description_total_and_free():
    """Issue 51, kind 9: Ollama's key=value lines, read by its source's keys (ollama/ollama discover/types.go
    "inference compute", server/sched.go "gpu memory", discover/gpu.go "updating cuda memory data"). Ollama's `id` is
    its own (a UUID here), never ggml's index: such a device is named by its backend alone, as one without an index
    is. ollama-inference-compute-a10g.txt (batteries-included/batteries-included#1663): 0.1 GiB values in MiB."""
    assert ollama((CAPTURES / "ollama-inference-compute-a10g.txt").read_text()) == [
        ("CUDA", "CUDA", None, "NVIDIA A10G", 22528, 22221, 0)
    ]
    # ollama-gpu-memory-available-free.txt (ollama#16946): `available` there is free less Ollama's reserve; `free` is
    # the device's
    assert ollama((CAPTURES / "ollama-gpu-memory-available-free.txt").read_text()) == [
        ("CUDA", "CUDA", None, "", None, 11674, 0)
    ]


def test_ollama_memory_update_takes_now_and_drops_a_wrapped_free():
    """ollama-cuda-memory-before-now-underflow.txt (ollama#10553): `now.*` over `before.*`, one device per `gpu=` id;
    the 3090's now.free="17179869183.8 GiB" is an unsigned subtraction that wrapped, so its free stays unknown."""
    assert ollama((CAPTURES / "ollama-cuda-memory-before-now-underflow.txt").read_text()) == [
        ("CUDA", "CUDA", None, "NVIDIA GeForce RTX 5090", 32563, 16282, 0),
        ("CUDA", "CUDA", None, "NVIDIA GeForce RTX 3090", 24576, None, 0),
    ]


def test_ollama_probe_lines_join_the_key_value_line_by_its_id_and_their_mib_win():
    """ollama-journal-zh-date-inference-compute.txt (ollama#9245): its CUDA probe's `[GPU-…] CUDA totalMem 16076 mb`
    (gpu_info_nvcuda.c, whole MiB) and the "inference compute" line with the same id are one device; the exact MiB
    win over total="15.7 GiB" available="15.4 GiB"."""
    assert ollama((CAPTURES / "ollama-journal-zh-date-inference-compute.txt").read_text()) == [
        ("CUDA", "CUDA", None, "NVIDIA GeForce RTX 4080", 16076, 15811, 0)
    ]


def test_ollama_lines_since_it_reads_ggml_s_devices_give_ggml_s_name():
    """Since Ollama reads ggml's devices (2025-10, discover/types.go), `name` is ggml's (`CUDA0`) and `description`
    ggml's; its keys in the source's order (a line built from them, no capture), then a ROCm line of the old form
    (`library=rocm`, its name the vendor's) and Ollama's SYCL (`oneapi`)."""
    line = (
        'time=2025-11-04T10:00:00.000Z level=INFO source=types.go:42 msg="inference compute" id=GPU-8c5284c3 '
        'filter_id="" library=CUDA compute=8.9 name=CUDA0 description="NVIDIA L4" libdirs=ollama,cuda_v13 '
        'driver=13.0 pci_id=0000:31:00.0 type=discrete total="22.5 GiB" available="22.0 GiB"\n'
        'level=INFO msg="inference compute" id=0 library=rocm variant="" compute=gfx1030 driver=6.3 name=1002:73bf '
        'total="16.0 GiB" available="1.3 GiB"\n'
        'level=INFO msg="inference compute" id=0 library=oneapi name="Intel(R) Arc(TM) A770 Graphics" total="15.9 GiB"'
    )
    assert ollama(line) == [
        ("CUDA0", "CUDA", 0, "NVIDIA L4", 23040, 22528, 0),
        ("ROCm", "ROCm", None, "1002:73bf", 16384, 1331, 0),
        ("SYCL", "SYCL", None, "Intel(R) Arc(TM) A770 Graphics", 16282, None, 0),
    ]
