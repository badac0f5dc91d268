import dataclasses
from pathlib import Path

import pytest

from buildmgr.building.builder import BuildTree, configure_command, error_excerpt
from buildmgr.building.plan import default_jobs, make_plan, parse_jobs
from buildmgr.building.recipes import Recipe
from buildmgr.building.source.tree import SourceTree
from buildmgr.core.errors import UserError
from buildmgr.tools.toolchain import Tool, Toolchain


def toolchain(ccache: bool = True, cc_version: str = "cc 12.2.0") -> Toolchain:
    return Toolchain(
        cmake=Tool("cmake", "/opt/cmake", "4.4.5"),
        ninja=Tool("ninja", "/opt/ninja", "1.13.2"),
        cc=Tool("cc", "/usr/bin/cc", cc_version),
        cxx=Tool("c++", "/usr/bin/c++", "c++ 12.2.0"),
        ccache=Tool("ccache", "/usr/bin/ccache", "4.7.5") if ccache else Tool("ccache"),
    )


RECIPE = Recipe("cpu", "cpu", ("CPU",), ("llama-cli",), defines=(("GGML_NATIVE", "ON"),))
SOURCE = SourceTree(Path("/src/llama.cpp"), "pypi:x", "0c1e57098bba43ac", 0, "0.5.0", "0c1e57098bba43ac")


def test_error_excerpt_starts_at_first_failure():
    lines = ["[1/3] ok", "FAILED: a.o", "a.c:1: error: boom", "ninja: build stopped"]
    assert error_excerpt(lines) == ("FAILED: a.o", "a.c:1: error: boom", "ninja: build stopped")
    assert error_excerpt(["x"] * 30 + ["CMake Error at X:1", "detail"])[:1] == ("CMake Error at X:1",)
    assert error_excerpt([str(i) for i in range(50)], limit=3) == ("47", "48", "49")


def test_configure_command_sets_launchers_rpath_and_source_commit():
    plan = make_plan(RECIPE, SOURCE, toolchain(), 2)
    command = configure_command(plan, BuildTree(Path("/t")))
    assert command[:8] == [
        "/opt/cmake",
        "-S",
        "/t/src",
        "-B",
        "/t/build",
        "-G",
        "Ninja",
        "-DCMAKE_MAKE_PROGRAM=/opt/ninja",
    ]
    for flag in (
        "-DCMAKE_CXX_COMPILER_LAUNCHER=/usr/bin/ccache",
        "-DCMAKE_CUDA_COMPILER_LAUNCHER=/usr/bin/ccache",
        "-DGGML_CCACHE=OFF",
        "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGIN",
        "-DLLAMA_BUILD_COMMIT=0c1e570",
        "-DLLAMA_BUILD_NUMBER=0",
        "-DGGML_NATIVE=ON",
        "-DLLAMA_BUILD_TESTS=OFF",
    ):
        assert flag in command
    assert not any(
        "LAUNCHER" in arg
        for arg in configure_command(make_plan(RECIPE, SOURCE, toolchain(ccache=False), 2), BuildTree(Path("/t")))
    )


def test_identity_covers_toolchain_and_source_but_not_ccache_or_jobs():
    base = make_plan(RECIPE, SOURCE, toolchain(), 2)
    assert base.build_id == f"cpu-{base.digest[:8]}"
    assert make_plan(RECIPE, SOURCE, toolchain(ccache=False), 8).digest == base.digest
    assert make_plan(RECIPE, SOURCE, toolchain(cc_version="cc 13"), 2).digest != base.digest
    other = SourceTree(SOURCE.path, "x", "1111111aaaa", 0, "0.5.0", "1111111aaaa")
    assert make_plan(RECIPE, other, toolchain(), 2).digest != base.digest
    assert base.prefix(Path("/d/builds")) == Path(f"/d/builds/0.5.0-0c1e570/{base.build_id}")


def test_a_toolchain_added_with_toolchain_add_is_identity_and_adds_its_rpath_and_the_others_keep_their_id():
    from buildmgr.store.receipt import ToolchainRef

    base = make_plan(RECIPE, SOURCE, toolchain(), 2)
    assert base.digest.startswith("bdf84003")  # what it was before toolchains could be added (#23)
    ref = ToolchainRef("cuda-13.0", "cuda", "13.0", {"nvidia-cuda-nvcc": "13.0.88"})
    with_it = make_plan(RECIPE, SOURCE, toolchain(), 2, toolchains=(ref,))
    other = ToolchainRef("cuda-13.0", "cuda", "13.0", {"nvidia-cuda-nvcc": "13.0.89"})
    assert (
        len({base.digest, with_it.digest, make_plan(RECIPE, SOURCE, toolchain(), 2, toolchains=(other,)).digest}) == 3
    )
    extra = ("$ORIGIN/../../../../toolchains/cuda-13.0/lib",)
    command = configure_command(dataclasses.replace(with_it, runpath=extra), BuildTree(Path("/t")))
    assert f"-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGIN;{extra[0]}" in command


def test_default_jobs_respects_memory_per_job():
    assert default_jobs(16, 64, 2.0) == 16
    assert default_jobs(16, 9, 2.0) == 4
    assert default_jobs(16, 64, 4.0) == 16 and default_jobs(16, 40, 4.0) == 10  # CUDA's budget
    assert default_jobs(2, 1, 2.0) == 1
    assert parse_jobs("3", 2, 1, 2.0) == 3
    with pytest.raises(UserError):
        parse_jobs("0", 2, 1, 2.0)


def test_generated_flags_for_hip_and_cuda_arches():
    from buildmgr.backends.hip import arch as hip_arch
    from buildmgr.building.plan import Arch
    from buildmgr.building.recipes import compose, load_recipes
    from buildmgr.core.config import resource_path

    recipes = load_recipes(resource_path("recipes"))
    value, label = hip_arch.parse_gfx("gfx1151,gfx1100")
    plan = make_plan(
        compose("hip", recipes),
        SOURCE,
        toolchain(),
        2,
        arch=Arch((("GPU_TARGETS", value),), label),
        backend_versions={"rocm": "6.2.0"},
        host_defines={"CMAKE_HIP_COMPILER": "/opt/rocm/llvm/bin/clang"},
    )
    command = configure_command(plan, BuildTree(Path("/t")))
    assert {
        "-DGGML_HIP=ON",
        "-DGPU_TARGETS=gfx1100;gfx1151",
        "-DCMAKE_HIP_COMPILER=/opt/rocm/llvm/bin/clang",
        "-DCMAKE_HIP_COMPILER_LAUNCHER=/usr/bin/ccache",
    } <= set(command)
    assert plan.build_id.startswith("hip-gfx1100_gfx1151-")
    other_rocm = make_plan(
        compose("hip", recipes),
        SOURCE,
        toolchain(),
        2,
        arch=Arch((("GPU_TARGETS", value),), label),
        backend_versions={"rocm": "6.3.0"},
        host_defines={"CMAKE_HIP_COMPILER": "/elsewhere/clang"},
    )
    assert other_rocm.digest != plan.digest  # tool versions are identity; tool paths are not
    same_rocm = make_plan(
        compose("hip", recipes),
        SOURCE,
        toolchain(),
        2,
        arch=Arch((("GPU_TARGETS", value),), label),
        backend_versions={"rocm": "6.2.0"},
        host_defines={"CMAKE_HIP_COMPILER": "/elsewhere/clang"},
    )
    assert same_rocm.digest == plan.digest

    cuda = make_plan(
        compose("vulkan+cuda", recipes),
        SOURCE,
        toolchain(),
        2,
        arch=Arch((("CMAKE_CUDA_ARCHITECTURES", "86-real;89"),), "sm86_89"),
    )
    command = configure_command(cuda, BuildTree(Path("/t")))
    assert {"-DGGML_CUDA=ON", "-DGGML_VULKAN=ON", "-DCMAKE_CUDA_ARCHITECTURES=86-real;89"} <= set(command)
    assert cuda.build_id.startswith("cuda+vulkan-sm86_89-")


def test_a_build_step_streams_both_outputs_in_order_into_the_log_and_the_feed(tmp_path):
    from buildmgr.core import proc

    log, fed = tmp_path / "build.log", []
    code = proc.stream(["sh", "-c", "echo one; echo two >&2; echo three; exit 4"], log, feed=fed.append)
    assert code == 4 and fed == ["one\n", "two\n", "three\n"]
    assert log.read_text().splitlines()[1:] == ["one", "two", "three"]
    assert proc.stream([str(tmp_path / "no-cmake")], log) == -1  # not a traceback: the reason is in the log
    assert log.read_text().splitlines()[-1].startswith("could not start: [Errno 2]")


def test_a_configured_tree_forgets_its_configure_and_keeps_what_it_compiled(tmp_path):
    """Issue #50 item 9: what `cmake --fresh` removes goes; the objects and Ninja's log stay (nothing compiles again)."""
    tree = BuildTree(tmp_path)
    tree.forget_configure()  # a tree never configured: nothing to forget
    (tree.build / "CMakeFiles" / "4.4.5").mkdir(parents=True)
    (tree.build / "CMakeCache.txt").write_text("GGML_LLAMAFILE:BOOL=ON\n")
    kept = [tree.build / ".ninja_log", tree.build / "ggml" / "src" / "CMakeFiles" / "ggml-base.dir" / "ggml.c.o"]
    kept[1].parent.mkdir(parents=True)
    for path in kept:
        path.write_text("x")
    tree.forget_configure()
    assert not (tree.build / "CMakeCache.txt").exists() and not (tree.build / "CMakeFiles").exists()
    assert all(path.read_text() == "x" for path in kept)


def test_a_host_whose_available_memory_is_unknown_gets_a_job_per_core_and_is_told(tmp_path, monkeypatch):
    """Issue #67: where /proc/meminfo has no MemAvailable (macOS has no /proc at all), the jobs were chosen as if
    4.0 GiB were free, silently. Unknown is unknown: a job per core, and the build says why and how to set fewer."""
    from buildmgr.building import options
    from buildmgr.building.options import BuildRequest
    from buildmgr.core import hostfacts

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree:         1024000 kB\n")
    assert hostfacts.meminfo_kib("MemTotal", meminfo) == 16384000
    assert hostfacts.available_mib(meminfo) is None and hostfacts.available_mib(tmp_path / "none") is None
    meminfo.write_text("MemTotal:       16384000 kB\nMemAvailable:    9216000 kB\n")
    assert hostfacts.available_mib(meminfo) == 9000
    assert default_jobs(16, None, 2.0) == 16

    said: list[str] = []
    monkeypatch.setattr(hostfacts, "available_mib", lambda path=None: None)
    jobs = options.build_jobs(BuildRequest(), ("CPU",), said.append)
    assert jobs == (hostfacts.read().cpus or 1)
    assert len(said) == 1 and "MemAvailable" in said[0] and "--jobs" in said[0]
    monkeypatch.setattr(hostfacts, "available_mib", lambda path=None: 1024)
    assert options.build_jobs(BuildRequest(), ("CPU",), said.append) == 1 and len(said) == 1
