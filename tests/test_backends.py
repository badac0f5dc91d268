import os
import re
import sys
from pathlib import Path

import pytest
from conftest import VULKAN_PROVISIONED, assert_user_error, buildmgr

from buildmgr import backends
from buildmgr.backends import Host, cpu
from buildmgr.backends.cuda import arch as cuda_arch
from buildmgr.backends.cuda import preflight as cuda_preflight
from buildmgr.backends.hip import arch as hip_arch
from buildmgr.backends.hip import device_code as hip_device_code
from buildmgr.backends.hip import preflight as hip_preflight
from buildmgr.backends.vulkan import preflight as vulkan_preflight
from buildmgr.core.errors import UserError

NVCC_13_ARCHS = (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)


@pytest.mark.parametrize(
    ("text", "value", "label"),
    [
        ("86", "86", "sm86"),
        ("8.6", "86", "sm86"),
        ("89,86", "86-real;89", "sm86_89"),  # SASS for each, PTX for the highest
        ("86, 89, 86", "86-real;89", "sm86_89"),
        ("90a", "90a", "sm90a"),
        ("75,120", "75-real;120", "sm75_120"),
    ],
)
def test_sm_policy(text, value, label):
    assert cuda_arch.parse_sm(text, NVCC_13_ARCHS, "13.0") == (value, label)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("50", "nvcc 13.0 cannot build compute capability 50 (it builds 75–121); CUDA 13 dropped everything below 75"),
        ("sm_86", "is not a CUDA compute capability"),
        ("", "is not a CUDA compute capability"),
        ("8.6.1", "is not a CUDA compute capability"),
    ],
)
def test_bad_sm(text, message):
    with pytest.raises(UserError, match=re.escape(message)):
        cuda_arch.parse_sm(text, NVCC_13_ARCHS, "13.0")


def test_nvcc_output_parsing():
    assert cuda_preflight.parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.88\n") == "13.0"
    assert cuda_arch.parse_gpu_archs("compute_75\ncompute_80\ncompute_90\n") == (75, 80, 90)


def test_gfx():
    assert hip_arch.parse_gfx("gfx1151,gfx1100") == ("gfx1100;gfx1151", "gfx1100_gfx1151")
    with pytest.raises(UserError, match="not an AMD GPU target"):
        hip_arch.parse_gfx("rdna3")
    assert str(hip_preflight.parse_rocm_version("6.1.40091-a8dbc0c19\n")) == "6.1.40091"


@VULKAN_PROVISIONED
@pytest.mark.network
def test_vulkan_header_version_from_a_real_header(vulkan_toolchain):
    """Debian 13's libvulkan-dev, which `buildmgr toolchain add vulkan` unpacks on Debian 12: 1.4.309."""
    header = Path(vulkan_toolchain["path"]) / "usr" / "include" / "vulkan" / "vulkan_core.h"
    assert str(vulkan_preflight.parse_header_version(header.read_text())) == "1.4.309"


def test_vulkan_header_version_without_the_complete_define_is_1_3():
    assert str(vulkan_preflight.parse_header_version("#define VK_HEADER_VERSION 239\n")) == "1.3.239"


def test_native_cpu_with_backend_dl_is_refused_on_x86_only():
    with pytest.raises(UserError, match="GGML_NATIVE=ON cannot be combined with GGML_BACKEND_DL=ON on x86"):
        cpu.check_defines({"GGML_BACKEND_DL": "ON", "GGML_NATIVE": "ON"}, "x86_64")
    cpu.check_defines({"GGML_BACKEND_DL": "ON", "GGML_NATIVE": "ON"}, "aarch64")


def test_vulkan_preflight_reports_each_missing_piece(tmp_path):
    from buildmgr.tools.toolchain import detect

    host = Host({"VULKAN_SDK": str(tmp_path)}, "Linux", "x86_64", detect({}))
    report = vulkan_preflight.inspect(host, vulkan_preflight.locate(host), deep=False)
    by_what = {c.what: c for c in report.checks}
    assert set(by_what) == {"Vulkan headers", "glslc", "Vulkan loader", "SPIRV-Headers CMake package"}
    for (
        check
    ) in report.checks:  # the empty SDK provides nothing: each piece is missing with its fix, or found elsewhere
        assert check.fix if not check.ok else str(tmp_path) not in check.found, check
    old = tmp_path / "include" / "vulkan"
    old.mkdir(parents=True)
    (old / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 239\n")
    report = vulkan_preflight.inspect(host, vulkan_preflight.locate(host), deep=False)
    headers = next(c for c in report.checks if c.what == "Vulkan headers")
    assert not headers.ok and headers.found.startswith("1.3.239") and "1.3.272" in headers.fix


# --- through the CLI, on this host ------------------------------------------------------


def test_cli_refuses_bad_arch_and_combinations_before_anything_is_written(tmp_path, tmp_env):
    assert_user_error(buildmgr(tmp_env, "build", "cpu", "--sm", "86"), "--sm applies to recipes with CUDA")
    assert_user_error(buildmgr(tmp_env, "build", "vulkan", "--gfx", "gfx1100"), "--gfx applies to recipes with HIP")
    assert_user_error(buildmgr(tmp_env, "build", "cuda+hip"), "cannot combine cuda and hip", "non-DL")
    assert_user_error(buildmgr(tmp_env, "build", "universal+cpu"), "cannot combine universal and cpu")
    assert_user_error(buildmgr(tmp_env, "build", "hip"), "ROCm", "6.1")
    assert_user_error(buildmgr(tmp_env, "build", "metal"), "macOS")
    assert_user_error(buildmgr(tmp_env, "build", "-D", "GGML_CUDA_FA"), "expected KEY=VALUE")
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


def _toolkit_without_cublas() -> bool:
    nvcc = cuda_preflight.find_nvcc({})
    return nvcc is not None and not list(Path(nvcc).resolve().parent.parent.glob("**/cublas_v2.h"))


@pytest.mark.skipif(not _toolkit_without_cublas(), reason="needs a CUDA toolkit without cuBLAS (as on this host)")
def test_a_toolkit_without_cublas_stops_at_preflight(tmp_path, tmp_env):
    """ggml-cuda links cuBLAS: found out before configure, not by CMake's 'CUDA::cublas not found'."""
    env = {k: v for k, v in tmp_env.items() if k not in ("CUDA_HOME", "CUDAToolkit_ROOT", "CUDA_PATH")}
    assert_user_error(buildmgr(env, "build", "cuda", "--sm", "75"), "CUDA: cuBLAS: not in", "libcublas-dev")
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


FAKE_NVCC = """#!{python}
import pathlib, sys
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if "--version" in sys.argv:
    print("Cuda compilation tools, release 13.0, V13.0.88")
elif "--list-gpu-arch" in sys.argv:
    print("compute_75\\ncompute_90")
elif "-o" in sys.argv:
    pathlib.Path(sys.argv[sys.argv.index("-o") + 1]).write_bytes(b"")
"""


def fake_cuda_host(tmp_path: Path) -> tuple[Host, Path, Path]:
    """A toolkit whose nvcc writes each of its runs to a log, with cuBLAS beside it."""
    from buildmgr.tools.toolchain import Tool, Toolchain

    toolkit, log = tmp_path / "cuda", tmp_path / "nvcc-runs"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "lib64").mkdir()
    (toolkit / "include" / "cublas_v2.h").write_text("")
    (toolkit / "lib64" / "libcublas.so.13").write_text("")
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable, log=str(log)))
    nvcc.chmod(0o755)
    tools = Toolchain(Tool("cmake"), Tool("ninja"), Tool("cc"), Tool("c++", "/usr/bin/c++", "c++ 12"), Tool("ccache"))
    return Host({"CUDA_HOME": str(toolkit), "PATH": "/usr/bin:/bin"}, "Linux", "x86_64", tools), nvcc, log


def preflight(host: Host, memo_file: Path, sm: str = "90"):
    from types import SimpleNamespace

    from buildmgr.building.options import BuildRequest, resolve_arch
    from buildmgr.building.preflight import inspect
    from buildmgr.core.memo import Memo

    memo = Memo.load(memo_file)
    report = inspect(("CUDA",), host, memo=memo)
    arch = resolve_arch(SimpleNamespace(backends=("CUDA",)), BuildRequest("cuda", (("--sm", sm),)), host, memo)
    memo.save(memo_file)
    return report, arch


def runs(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_cuda_preflight_is_remembered_until_nvcc_changes(tmp_path):
    """A GPU no-op starts no program: nvcc's answers are kept while its file (and cuBLAS's) stay the same."""
    host, nvcc, log = fake_cuda_host(tmp_path)
    memo_file = tmp_path / "preflight.json"
    first = preflight(host, memo_file)
    assert len(runs(log)) == 4  # --version twice (inspect, --sm), --list-gpu-arch, the host-compiler probe
    assert first[1].defines == (("CMAKE_CUDA_ARCHITECTURES", "90"),) and first[0].versions == {"nvcc": "13.0"}
    assert preflight(host, memo_file) == first
    assert len(runs(log)) == 4
    assert preflight(host, memo_file, sm="75")[1].label == "sm75"  # another --sm is asked for once
    assert len(runs(log)) == 6
    stat = nvcc.stat()
    os.utime(nvcc, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # an upgraded toolkit
    assert preflight(host, memo_file) == first
    assert len(runs(log)) == 10


def test_a_failed_cuda_preflight_is_never_remembered(tmp_path):
    host, _, log = fake_cuda_host(tmp_path)
    memo_file = tmp_path / "preflight.json"
    (tmp_path / "cuda" / "include" / "cublas_v2.h").unlink()
    for _ in range(2):
        report, _arch = preflight(host, memo_file)
        assert [c.what for c in report.failures] == ["cuBLAS"]
    assert sum(line == "--version" for line in runs(log)) == 3  # inspect both times; --sm's answer was kept


def _is(value, kind) -> bool:
    """Does a value have the declared type (classes, X | None, tuple[X, ...], tuple[X, Y], dict[K, V])?"""
    import types
    import typing

    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        return any(_is(value, a) for a in args)
    if kind is type(None):
        return value is None
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_is(v, args[0]) for v in value)
        return len(value) == len(args) and all(_is(v, a) for v, a in zip(value, args, strict=False))
    if origin is dict:
        return isinstance(value, dict) and all(_is(k, args[0]) and _is(v, args[1]) for k, v in value.items())
    if origin is not None:
        return isinstance(value, origin)
    return isinstance(value, kind)


def _hints(record_type):
    """A base record's field types, with the names it imports only for type checking."""
    import typing

    from buildmgr.core import device_records
    from buildmgr.tools import toolchain

    names = {"Captures": device_records.Captures, "Device": device_records.Device, "Toolchain": toolchain.Toolchain}
    return typing.get_type_hints(record_type, localns=names)


def _lazy_references(record, path=""):
    """(where, function, declared type) for every function a backend's record names through `lazy`, in the record
    and in the records it holds (arch option, capture, GPU code, kits)."""
    import dataclasses

    fields = record._fields if hasattr(record, "_fields") else [f.name for f in dataclasses.fields(record)]
    hints = _hints(type(record))
    for name in fields:
        value = getattr(record, name)
        where = f"{path}{name}"
        if hasattr(value, "lazy_target"):
            yield where, value, hints[name]
        items = value if isinstance(value, tuple) and not hasattr(value, "_fields") else (value,)
        for index, item in enumerate(items):
            if type(item).__module__ in ("buildmgr.backend_spec", "buildmgr.tools.kit_spec") and not isinstance(
                item, str
            ):
                yield from _lazy_references(item, path=f"{where}[{index}]." if items is not (value,) else f"{where}.")


def _takes(function, declared) -> bool:
    """Does the function accept as many positional arguments as the declared Callable passes?"""
    import collections.abc
    import inspect
    import typing

    callables = [k for k in (declared, *typing.get_args(declared)) if typing.get_origin(k) is collections.abc.Callable]
    arity = len(typing.get_args(callables[0])[0])
    try:
        inspect.signature(function).bind(*([None] * arity))
    except TypeError:
        return False
    return True


def test_every_backend_package_declares_a_record_whose_functions_exist():
    """Each backends/<name>/ has a `Backend` of the declared field types, and every function it names lazily
    resolves to one that takes the arguments its field passes (a misspelt or moved function fails here, not on a
    user's host)."""
    import typing

    from buildmgr.backend_spec import resolve_lazy

    hints = _hints(backends.Backend)
    found = backends._discovered()
    assert {b.name for b in found} >= {"CPU", "CUDA", "Vulkan", "ROCm", "SYCL", "Metal", "RPC", "GPUOpenCL"}
    for backend in found:
        wrong = [f for f in backends.Backend._fields if f in hints and not _is(getattr(backend, f), hints[f])]
        wrong = [f for f in wrong if not callable(getattr(backend, f))]  # functions are checked below
        assert not wrong, f"{backend.name}: {wrong} not of the declared type"
        for where, function, declared in _lazy_references(backend):
            target = resolve_lazy(*function.lazy_target)
            assert callable(target), (backend.name, where)
            assert _takes(target, declared), f"{backend.name}.{where}: {function.lazy_target} takes other arguments"
    # the checker itself can fail: a misspelt function, and one that takes other arguments
    with pytest.raises(AttributeError):
        resolve_lazy("buildmgr.backends.cuda.arch", "no_such_function")
    assert not _takes(lambda a: a, typing.Callable[[int, int], int])
    assert _is(None, hints["ci"]) and not _is(None, hints["names"])


def test_why_a_built_backend_has_no_device_comes_from_its_module():
    from buildmgr.devices.inventory import absence_reasons

    assert absence_reasons(["CPU", "RPC"], set(), {}, {}) == []  # no device is expected of either
    reasons = absence_reasons(["CUDA", "ROCm", "Metal"], set(), {"HIP_VISIBLE_DEVICES": "-1"}, {})
    assert [r.split(":")[0] for r in reasons] == ["CUDA", "ROCm", "Metal"]
    assert "nvidia-smi" in reasons[0] and "HIP_VISIBLE_DEVICES" in reasons[1]  # each module's own reason
    assert absence_reasons(["CUDA"], {"CUDA"}, {}, {}) == []  # a device of it was seen


def test_each_architecture_option_resolves_through_its_backend_in_a_fixed_order(tmp_path):
    """CUDA's before HIP's whatever the recipe's order: the labels join into the build id."""
    from types import SimpleNamespace

    from buildmgr.building.options import BuildRequest, resolve_arch
    from buildmgr.core.memo import Memo

    host, _, _ = fake_cuda_host(tmp_path)
    request = BuildRequest("cuda+hip", (("--gfx", "gfx1100"), ("--sm", "90")))
    arch = resolve_arch(SimpleNamespace(backends=("ROCm", "CUDA", "CPU")), request, host, Memo())
    assert arch.defines == (("CMAKE_CUDA_ARCHITECTURES", "90"), ("GPU_TARGETS", hip_arch.parse_gfx("gfx1100")[0]))
    assert arch.label == "-".join(("sm90", hip_arch.parse_gfx("gfx1100")[1]))


def fake_rocm(root: Path, version: str = "6.4.3") -> Path:
    """A ROCm tree in AMD's layout: hipconfig that prints its version, the hipBLAS/rocBLAS CMake packages, clang."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hipconfig").write_text(f"#!/bin/sh\necho {version}\n")
    (root / "bin" / "hipconfig").chmod(0o755)
    for package in ("hipblas", "rocblas"):
        (root / "lib" / "cmake" / package).mkdir(parents=True)
    (root / "llvm" / "bin").mkdir(parents=True)
    (root / "llvm" / "bin" / "clang").write_text("")
    (root / "lib" / "rocblas" / "library").mkdir(parents=True)
    (root / "lib" / "rocblas" / "library" / "TensileLibrary_lazy_gfx1100.dat").write_text("")
    return root


def test_rocm_is_located_once_and_its_checks_and_memo_inputs_come_from_that(tmp_path):
    from buildmgr.tools.toolchain import Tool, Toolchain

    root = fake_rocm(tmp_path / "rocm")
    tools = Toolchain(Tool("cmake"), Tool("ninja"), Tool("cc"), Tool("c++"), Tool("ccache"))
    host = Host({"ROCM_PATH": str(root), "PATH": "/usr/bin:/bin"}, "Linux", "x86_64", tools)
    found = hip_preflight.locate(host)
    assert found.hipconfig == str(root / "bin" / "hipconfig")
    assert set(found.inputs) == {
        str(root / "bin" / "hipconfig"),
        str(root / "lib" / "cmake" / "hipblas"),
        str(root / "lib" / "cmake" / "rocblas"),
        str(root / "llvm" / "bin" / "clang"),
        str(root / "lib" / "rocblas" / "library"),
    }
    report = hip_preflight.inspect(host, found, deep=False)
    assert not report.failures and report.host_defines == {"CMAKE_HIP_COMPILER": str(root / "llvm" / "bin" / "clang")}
    assert report.versions == {"rocm": "6.4.3"}
    (root / "lib" / "cmake" / "rocblas").rmdir()
    [missing] = hip_preflight.inspect(host, hip_preflight.locate(host), deep=False).failures
    assert missing.what == "rocblas" and "rocblas-dev" in missing.fix
    old = fake_rocm(tmp_path / "old", version="5.7.1")
    [too_old] = hip_preflight.inspect(
        host, hip_preflight.locate(Host({"ROCM_PATH": str(old)}, "Linux", "x86_64", tools)), deep=False
    ).failures
    assert too_old.what == "ROCm" and too_old.found.startswith("5.7.1")
    assert "stops with 'At least ROCM/HIP V6.1 is required'" in too_old.fix


def fake_debian_rocm(root: Path, kernels=("gfx1100", "gfx1101")) -> Path:
    """ROCm as Debian packages it under /usr: hipconfig in bin, CMake packages and rocBLAS kernels under the multiarch
    folder, ROCm's clang as the distribution's clang-NN (hipconfig --hipclangpath names it)."""
    (root / "lib" / "llvm-21" / "bin").mkdir(parents=True)
    (root / "lib" / "llvm-21" / "bin" / "clang").write_text(
        "#!/bin/sh\nprintf '\\tgfx1100\\n\\tgfx1101\\n\\tgfx1151\\n'\n"
    )
    (root / "lib" / "llvm-21" / "bin" / "clang").chmod(0o755)
    (root / "bin").mkdir()
    clang_dir = root / "lib" / "llvm-21" / "bin"
    (root / "bin" / "hipconfig").write_text(
        f'#!/bin/sh\nif [ "$1" = --hipclangpath ]; then echo {clang_dir}; else echo 6.4.43484-9999; fi\n'
    )
    (root / "bin" / "hipconfig").chmod(0o755)
    for package, version in (("hip", "6.4.43484"), ("hipblas", "2.4.0"), ("rocblas", "4.4.1")):
        (root / "lib" / "x86_64-linux-gnu" / "cmake" / package).mkdir(parents=True)
        (root / "lib" / "x86_64-linux-gnu" / "cmake" / package / f"{package}-config-version.cmake").write_text(
            f'set(PACKAGE_VERSION "{version}")\n'
        )
    library = root / "lib" / "x86_64-linux-gnu" / "rocblas" / "4.4.1" / "library"
    library.mkdir(parents=True)
    for gfx in kernels:
        (library / f"TensileLibrary_lazy_{gfx}.dat").write_text("")
        (library / f"TensileLibrary_Type_HH_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_{gfx}.hsaco").write_text("")
    return root


def test_a_distributions_rocm_under_usr_is_found_with_its_own_paths(tmp_path):
    root = fake_debian_rocm(tmp_path / "usr")
    found = hip_preflight.find_rocm({"ROCM_PATH": str(root)})
    assert found.layout.root == "/usr" and found.hipconfig == str(root / "bin" / "hipconfig")
    assert found.packages["hipblas"] == root / "lib" / "x86_64-linux-gnu" / "cmake" / "hipblas"
    assert found.clang == root / "lib" / "llvm-21" / "bin" / "clang"
    assert hip_preflight.rocblas_targets(found) == {"gfx1100", "gfx1101"}
    from buildmgr.tools.toolchain import Tool, Toolchain

    tools = Toolchain(Tool("cmake"), Tool("ninja"), Tool("cc"), Tool("c++"), Tool("ccache"))
    report = hip_preflight.inspect(Host({"ROCM_PATH": str(root)}, "Linux", "x86_64", tools), found, deep=False)
    assert not report.failures and report.versions == {"rocm": "6.4.43484", "hipblas": "2.4.0", "rocblas": "4.4.1"}
    hipblas = next(c for c in report.checks if c.what == "hipblas")
    assert hipblas.found == f"2.4.0 at {root / 'lib' / 'x86_64-linux-gnu' / 'cmake' / 'hipblas'}"
    assert report.host_defines == {"CMAKE_HIP_COMPILER": str(root / "lib" / "llvm-21" / "bin" / "clang")}
    kernels = next(c for c in report.checks if c.what == "rocBLAS kernels")
    assert kernels.found.startswith("gfx1100, gfx1101 in ") and "rocblas/4.4.1/library" in kernels.found


def test_a_gfx_target_without_rocblas_kernels_is_refused_with_the_ones_it_has(tmp_path):
    found = hip_preflight.find_rocm({"ROCM_PATH": str(fake_debian_rocm(tmp_path / "usr"))})
    hip_arch.check_gfx(["gfx1100", "gfx1101"], found, {})
    with pytest.raises(
        UserError, match=r"--gfx gfx1151: this ROCm's rocBLAS has no kernels .* it has gfx1100, gfx1101$"
    ):
        hip_arch.check_gfx(["gfx1100", "gfx1151"], found, {})
    with pytest.raises(
        UserError, match=r"--gfx gfx1030: ROCm's clang \(.*\) cannot compile it; it knows gfx1100, gfx1101"
    ):
        hip_arch.check_gfx(["gfx1030"], found, {})


def test_a_clang_that_cannot_say_its_targets_is_an_error_not_a_skipped_check(tmp_path):
    found = hip_preflight.find_rocm({"ROCM_PATH": str(fake_debian_rocm(tmp_path / "usr"))})
    found.clang.write_text("#!/bin/sh\necho 'clang: error: broken' >&2\nexit 1\n")
    with pytest.raises(UserError, match=r"cannot ask ROCm's clang \(.*\) which targets it compiles: .*broken"):
        hip_arch.check_gfx(["gfx1100"], found, {})


def test_amd_gpus_from_amdkfds_topology_without_rocm(tmp_path):
    nodes = tmp_path / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for node, version in (("0", 0), ("1", 110501), ("2", 90010), ("3", 110000)):
        (nodes / node).mkdir(parents=True)
        (nodes / node / "properties").write_text(f"cpu_cores_count 0\ngfx_target_version {version}\nsimd_count 80\n")
    assert hip_device_code.kfd_targets(tmp_path) == ["gfx90a", "gfx1100", "gfx1151"]
    # a rocminfo on the PATH given is never run while amdkfd answers
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rocminfo").write_text("#!/bin/sh\necho '  Name: gfx1030' > \"$0.ran\"\necho '  Name: gfx1030'\n")
    (bin_dir / "rocminfo").chmod(0o755)
    environ = {"PATH": str(bin_dir), "ROCM_PATH": str(tmp_path / "no-rocm")}
    assert hip_device_code.visible_targets(environ, tmp_path) == ["gfx90a", "gfx1100", "gfx1151"]
    assert not (bin_dir / "rocminfo.ran").exists()
    [finding] = hip_device_code.kernel_findings(["gfx90a", "gfx1100"], hip_device_code.kfd_targets(tmp_path))
    assert "the gfx1151 GPU has no code in this build (gfx90a, gfx1100)" in finding.message


def test_without_amdkfd_the_gpus_come_from_the_rocminfo_on_the_path_given(tmp_path):
    """The environment's PATH is the one searched (not this process's): rocminfo there lists the GPUs, its CPU agent
    (gfx000) left out; without one there is no GPU to name."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rocminfo").write_text(
        "#!/bin/sh\necho '  Name: gfx000'\necho '  Name: gfx1100'\necho '  Name: gfx90a'\n"
    )
    (bin_dir / "rocminfo").chmod(0o755)
    no_kfd = tmp_path / "sys"
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ROCM_PATH": str(tmp_path / "no-rocm")}
    assert hip_device_code.visible_targets(environ, no_kfd) == ["gfx90a", "gfx1100"]
    nowhere = {"PATH": str(tmp_path / "empty"), "ROCM_PATH": str(tmp_path / "no-rocm")}
    assert hip_device_code.visible_targets(nowhere, no_kfd) == []
    assert hip_device_code.visible_targets({"PATH": "", "ROCM_PATH": str(tmp_path)}, no_kfd) == ["gfx90a", "gfx1100"]


def test_a_host_without_kfd_says_it_has_no_hip_device(tmp_path, monkeypatch):
    monkeypatch.setattr(hip_device_code, "KFD", tmp_path / "kfd")
    assert hip_device_code.why_absent({}, {}).startswith("no HIP device on this host")
    (tmp_path / "kfd").write_text("")
    assert hip_device_code.why_absent({}, {}) == "no device found"


def test_the_rpc_servers_start_up_block_and_failures_are_read_from_what_it_printed():
    """The H100's ggml-rpc-server log (fixtures/h100/rpc68/second/server.log, issue #68): the block is whole only once
    its transport line came; its device list is read by the device-list reader; a line it fails with is named."""
    from buildmgr.devices.captures import parse_list_devices

    _, remote = backends.remote()
    lines = (Path(__file__).parent / "fixtures" / "h100" / "rpc68" / "second" / "server.log").read_text().splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("  transport"))
    assert remote.started(lines[:end]) is None  # printed up to the transport line: not listening yet
    block = remote.started(lines[: end + 1])
    assert block is not None
    assert (block.protocol, block.endpoint, block.cache) == ("7.0.0", "127.0.0.1:50052", None)
    assert block.transport == "TCP (RDMA auto-negotiate enabled)"
    [device] = parse_list_devices(block.devices_text)
    assert (device.name, device.description, device.memory_total_mib) == ("CUDA0", "NVIDIA H100 80GB HBM3", 81079)
    assert remote.failure(lines) is None
    listing = ["error: unknown device: Vulkan9", "available devices:", "  CPU: AMD EPYC (24016 MiB, 21904 MiB free)"]
    assert remote.failure(listing) == "it has no device 'Vulkan9' here (it has: CPU)"
    assert remote.failure([*lines[: end + 1], "Failed to create server socket"]).startswith("could not listen there")
    assert remote.refused("RPC server version mismatch: 6.1.0\nRPC handshake failed") == (
        "the server speaks RPC protocol 6.1.0"
    )
