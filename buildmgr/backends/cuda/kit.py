"""The CUDA toolkit from NVIDIA's PyPI wheels (`buildmgr toolchain add cuda`, `cuda-runtime`): the wheels pip
installed laid out as a toolkit CMake accepts, with a link-time driver stub. CUDA 13's wheels put everything under
nvidia/cu13/, CUDA 12's one folder per wheel (nvidia/cuda_nvcc, nvidia/cublas …)."""

from __future__ import annotations

import re
from pathlib import Path

from buildmgr.backends.cuda import TOOLKIT_ROOTS
from buildmgr.core import proc
from buildmgr.core.errors import UserError

_NOT_TOOLKIT = {"__init__.py", "__pycache__"}  # what makes the wheels' folders Python packages


def _merge(source: Path, root: Path) -> None:
    """Move every file under `source` to the same place under `root`; a file two wheels both ship must be the same."""
    import filecmp

    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if _NOT_TOOLKIT & set(relative.parts) or (path.is_dir() and not path.is_symlink()):
            continue
        target = root / relative
        if target.exists() or target.is_symlink():
            if not filecmp.cmp(path, target, shallow=False):
                raise UserError(f"two CUDA wheels ship different files at {relative}; report it to buildmgr")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)


def _wheel_release(root: Path) -> str:
    """MAJOR.MINOR of the CUDA runtime wheel that went in (nvidia_cuda_runtime[_cu12]-13.0.96.dist-info → 13.0)."""
    for info in sorted((root / "dist-info").glob("nvidia_cuda_runtime*-*.dist-info")):
        found = re.search(r"-(\d+)\.(\d+)\.", info.name)
        if found:
            return f"{found.group(1)}.{found.group(2)}"
    raise UserError("the wheels pip installed have no CUDA runtime (nvidia-cuda-runtime); report it to buildmgr")


def driver_api_names(preprocessed: str) -> list[str]:
    """The driver API functions a cuda.h declares, as object files reference them: after its macros renamed many
    (cuMemAlloc → cuMemAlloc_v2, and the _ptds/_ptsz forms under a per-thread default stream)."""
    return sorted(set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", preprocessed)))


def _driver_stub(root: Path, cc: str | None) -> None:
    """lib/stubs/libcuda.so, which the wheels lack: every driver API function as an empty one, under the driver's
    soname, so that executables link (a library with no symbols links shared libraries only). Link time only: it is
    never on a run-time path; the driver's own libcuda.so.1 is what runs."""
    header = root / "include" / "cuda.h"
    if cc is None:
        raise UserError("making the CUDA driver stub needs a C compiler: apt-get install build-essential")
    names: set[str] = set()
    for extra in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"]):
        ran = proc.run([cc, "-E", "-P", *extra, "-I", str(root / "include"), str(header)], timeout=120)
        if not ran.ok:
            raise UserError(f"the C compiler could not read {header}: {ran.failure()}")
        names.update(driver_api_names(ran.stdout))
    stubs = root / "lib" / "stubs"
    stubs.mkdir(parents=True)
    source = stubs / "libcuda-stub.c"
    source.write_text("".join(f"void {name}(void) {{}}\n" for name in sorted(names)), encoding="ascii")
    ran = proc.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stubs / "libcuda.so"), str(source)], timeout=300
    )
    source.unlink()
    if not ran.ok:
        raise UserError(f"the CUDA driver stub did not link: {ran.failure()}")


def _lay_out(site: Path, root: Path, cc: str | None, *, stub: bool) -> str:
    """The wheels pip installed into `site` → a toolkit at `root` that CMake's CUDA language and FindCUDAToolkit
    accept: bin/nvcc, include/, lib/ (and lib64 → lib) with unversioned library links, dist-info/ of every wheel.
    Its version is the release (13.0); the runtime alone goes by its major (13), as its sonames do
    (libcudart.so.13): a newer minor runs what an older one built."""
    for folder in sorted((site / "nvidia").iterdir()):
        if folder.is_dir() and folder.name not in _NOT_TOOLKIT:
            _merge(folder, root)
    (root / "dist-info").mkdir()
    for info in site.glob("*.dist-info"):
        info.rename(root / "dist-info" / info.name)
    lib = root / "lib"
    for library in sorted(lib.glob("lib*.so.*")):
        plain = lib / (library.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(library.name)
    (root / "lib64").symlink_to("lib")
    if stub:
        if not (root / "bin" / "nvcc").is_file():
            raise UserError("the CUDA wheels pip installed have no bin/nvcc, so they cannot build; nothing was added")
        _driver_stub(root, cc)
        return _wheel_release(root)
    return _wheel_release(root).split(".")[0]


def lay_out_toolkit(site: Path, root: Path, cc: str | None) -> str:
    return _lay_out(site, root, cc, stub=True)


def lay_out_runtime(site: Path, root: Path, cc: str | None) -> str:
    return _lay_out(site, root, cc, stub=False)


def toolkit_environ(root: Path) -> dict[str, str]:
    return dict.fromkeys(TOOLKIT_ROOTS, str(root))
