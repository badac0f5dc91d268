"""`doctor` remembers what costs seconds (nvcc's answers, an added toolchain's hashes) while the files behind it
stay, and sees every change of those files: a fake CUDA toolkit whose nvcc logs its runs, and a small added
toolchain, as on a host whose own toolkit lacks cuBLAS (the one docs/benchmarks.md measured)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from buildmgr import store
from buildmgr.building import doctor, kits
from buildmgr.core import memo
from buildmgr.core.config import Dirs, Settings
from buildmgr.store.receipt import Package, ToolchainReceipt

FAKE_NVCC = """#!{python}
import pathlib, sys
with open({log!r}, "a") as log:
    log.write(pathlib.Path(sys.argv[0]).parent.parent.name + " " + " ".join(sys.argv[1:2]) + "\\n")
if "--version" in sys.argv:
    print("Cuda compilation tools, release 13.0, V13.0.88")
elif "-o" in sys.argv:
    pathlib.Path(sys.argv[sys.argv.index("-o") + 1]).write_bytes(b"")
"""


def write_nvcc(toolkit: Path, log: Path) -> Path:
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable, log=str(log)))
    nvcc.chmod(0o755)
    return nvcc


def add_toolchain(dirs: Dirs, log: Path) -> Path:
    """cuda-13.0 as `toolchain add` publishes it: nvcc, cuBLAS, a header, and a receipt of every file's hash."""
    root = dirs.toolchains / "cuda-13.0"
    write_nvcc(root, log)
    for relative in ("include/cublas_v2.h", "lib64/libcublas.so.13", "include/cuda.h"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(b"/* cuda */\n")
    receipt = ToolchainReceipt(
        ToolchainReceipt.VERSION, "cuda-13.0", "cuda", "13.0", "CUDA", "cuda==13.0", "pip cuda-toolkit",
        (Package("nvidia-cuda-nvcc", "13.0.88", "ab" * 32, "file:///x.whl"),),
        "0.1.0", "2026-12-01T00:00:00+00:00", 1.0, 10, store.file_hashes(root, kits.RECEIPT),
    )  # fmt: skip
    (root / kits.RECEIPT).write_text(receipt.to_text())
    return root


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(dirs, environ, the nvcc log, the count of files hashed): this host's own toolkit has nvcc but no cuBLAS."""
    dirs = Dirs(tmp_path / "data" / "buildmgr", tmp_path / "cache" / "buildmgr", tmp_path / "config" / "buildmgr")
    log = tmp_path / "nvcc-runs"
    write_nvcc(tmp_path / "own", log)
    add_toolchain(dirs, log)
    hashed: list[str] = []
    real_hash = kits.sha256_file
    monkeypatch.setattr(kits, "sha256_file", lambda path: hashed.append(str(path)) or real_hash(path))
    environ = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "own")}
    return dirs, environ, log, hashed


def runs(log: Path) -> list[str]:
    """Each nvcc run since the last call: `own --version`, `cuda-13.0 -c` (the host-compiler probe) …"""
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return sorted(lines)


def settle() -> None:
    """Past the window in which a file's stamp may not show a second write (memo.SETTLE_NS)."""
    time.sleep(memo.SETTLE_NS / 1e9 + 0.1)


def test_doctor_remembers_nvcc_s_answers_and_a_toolchain_s_hashes_while_their_files_stay(host):
    dirs, environ, log, hashed = host
    every_run = ["cuda-13.0 --version", "cuda-13.0 -c", "own --version", "own -c"]
    fresh = doctor.doctor(dirs, environ, Settings())
    assert runs(log) == every_run and len(hashed) == 4
    assert [(s.added.id, s.problem) for s in fresh.toolchains] == [("cuda-13.0", None)]
    assert [c.what for c in fresh.checks if not c.ok and c.backend == "CUDA"] == ["cuBLAS"]
    hashed.clear()
    assert doctor.doctor(dirs, environ, Settings()) == fresh
    assert len(hashed) == 4  # its files were written just now: a second write may not show in their stamps yet

    settle()
    assert doctor.doctor(dirs, environ, Settings()) == fresh
    runs(log)
    hashed.clear()
    assert doctor.doctor(dirs, environ, Settings()) == fresh
    # the failed cuBLAS check is asked again (nvcc --version), the probe that passed is not; nothing is hashed
    assert runs(log) == ["own --version"] and hashed == []


def test_a_change_after_doctor_remembered_is_seen(host, tmp_path):
    """A toolchain file rewritten with its size and mtime put back (as `cp -p` or tar would) is still reported,
    and a changed nvcc is asked again."""
    dirs, environ, log, hashed = host
    settle()
    doctor.doctor(dirs, environ, Settings())
    hashed.clear()
    assert doctor.doctor(dirs, environ, Settings()).toolchains[0].problem is None
    assert hashed == []  # remembered
    header = dirs.toolchains / "cuda-13.0" / "include" / "cuda.h"
    before = header.stat()
    header.write_bytes(b"/* CUDA */\n")  # same size, other bytes
    os.utime(header, ns=(before.st_atime_ns, before.st_mtime_ns))
    [state] = doctor.doctor(dirs, environ, Settings()).toolchains
    assert state.problem == "include/cuda.h differs from what was added"

    runs(log)
    nvcc = tmp_path / "own" / "bin" / "nvcc"
    nvcc.write_text(nvcc.read_text() + "# upgraded\n")
    doctor.doctor(dirs, environ, Settings())
    assert runs(log) == ["own --version", "own -c"]
