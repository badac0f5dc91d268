"""Toolchains added with `buildmgr toolchain add`, without downloading one: bad requests, the receipt's hashes, what
builds need of them (remove, install-artifact), a runtime toolchain from this Python's own wheels, pip without a
network, and the matrix's stock-runner CUDA entries. tests/test_kits_build.py adds the real CUDA and Vulkan ones."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import re
from pathlib import Path

import pytest
from conftest import assert_user_error, buildmgr, make_env, make_receipt

from buildmgr import store
from buildmgr.artifacts import compat
from buildmgr.artifacts.matrix import MatrixRequest, matrix
from buildmgr.backends import all_kits
from buildmgr.backends.cuda import kit as cuda_kit
from buildmgr.building import kit_sources, kits, runtime
from buildmgr.building.options import all_recipes
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.store.receipt import Package, ToolchainReceipt, ToolchainRef

BUILD_ID = "cuda-sm75-0123abcd"


def dirs_of(root: Path) -> Dirs:
    return Dirs(root / "data" / "buildmgr", root / "cache" / "buildmgr", root / "config" / "buildmgr")


def fake_kit(dirs: Dirs, name: str = "cuda", version: str = "13.0", files: dict[str, bytes] | None = None) -> Path:
    """A toolchain folder with a receipt of the shape `toolchain add` writes (no download)."""
    root = dirs.toolchains / f"{name}-{version}"
    for relative, data in (files or {"bin/nvcc": b"#!/bin/false\n", "include/cuda.h": b"/* cuda */\n"}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    receipt = ToolchainReceipt(
        ToolchainReceipt.VERSION, f"{name}-{version}", name, version, "CUDA", f"{name}=={version}",
        "pip cuda-toolkit", (Package("nvidia-cuda-nvcc", "13.0.88", "ab" * 32, "file:///x.whl"),),
        "0.1.0", "2026-12-01T00:00:00+00:00", 1.0, 10, store.file_hashes(root, kits.RECEIPT),
    )  # fmt: skip
    (root / kits.RECEIPT).write_text(receipt.to_text())
    return root


def install_fake_build(dirs: Dirs, ref: ToolchainRef, needed: dict | None = None) -> Path:
    prefix = dirs.builds / "0.5.0-0c1e570" / BUILD_ID
    prefix.mkdir(parents=True)
    receipt = make_receipt(BUILD_ID, toolchains=[ref.__dict__], runtime={"needed": needed or {}})
    store.write_receipt(prefix, receipt)
    return prefix


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        # every kit a backend package declares, in the registry's order
        (("add", "nope"), f"unknown toolchain 'nope': buildmgr can add {', '.join(k.name for k in all_kits())}"),
        (("add", "cuda==11.8"), "unknown CUDA release '11.8'; buildmgr lays out NVIDIA's wheels of CUDA 13 for cuda"),
        (("add", "cuda-runtime==11.8"), "lays out NVIDIA's wheels of CUDA 12 and 13 for cuda-runtime"),
        (
            ("add", "cuda==12.8"),
            (
                "cuda==12.8: NVIDIA's CUDA 12 wheels have no nvcc (nvidia-cuda-nvcc-cu12 ships ptxas and libNVVM "
                "only); cuda==13.0 builds (the runtime alone: cuda-runtime==12.8)"
            ),
        ),
        (("add", "cuda==13.x"), "unknown CUDA release '13.x'"),
        (("add", "cuda=13.0"), "unknown toolchain 'cuda=13.0'"),
        (("add",), "toolchain add needs a NAME, e.g. buildmgr toolchain add cuda==13.0"),
        (("remove", "cuda-13.0"), "no toolchain 'cuda-13.0' is added (added: none)"),
        (("list", "cuda"), "toolchain list takes no NAME"),
    ],
)
def test_bad_requests_are_one_line_and_write_nothing(tmp_path, args, fragment):
    assert {"cuda", "cuda-runtime", "vulkan"} <= {k.name for k in all_kits()}
    assert_user_error(buildmgr(make_env(tmp_path), "toolchain", *args), fragment)
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


def test_a_request_names_a_kit_and_a_release():
    assert (kit_sources.parse_request("cuda==13.0").kit.name, kit_sources.parse_request("cuda==13.0").version) == (
        "cuda",
        "13.0",
    )
    assert kit_sources.parse_request("cuda-runtime==12").version == "12"
    assert kit_sources.parse_request("vulkan").version is None
    with pytest.raises(UserError, match=re.escape("unknown CUDA release '14.0'")):
        kit_sources.parse_request("cuda==14.0")


def test_the_driver_stub_exports_the_names_object_files_reference():
    text = "CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);\nCUresult cuGetErrorString(CUresult e, const char **s);\n"
    text += "typedef CUresult (*PFN_cuInit)(unsigned int);\nint cudaThing(void);\n"
    assert cuda_kit.driver_api_names(text) == ["cuGetErrorString", "cuMemAlloc_v2"]


def test_the_apt_mirror_is_read_from_deb822_and_one_line_sources():
    deb822 = {"/etc/apt/sources.list.d/debian.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
              "\nTypes: deb\nURIs: http://deb.debian.org/debian-security\n"}  # fmt: skip
    assert kit_sources.apt_mirror("", deb822) == "http://deb.debian.org/debian"
    one_line = "deb http://security.ubuntu.com/ubuntu jammy-security main\ndeb [arch=amd64] http://archive.ubuntu.com/ubuntu jammy main\n"
    assert kit_sources.apt_mirror(one_line, {}) == "http://archive.ubuntu.com/ubuntu"
    assert kit_sources.apt_mirror("# nothing\n", {}) is None


def test_a_changed_toolchain_is_refused_by_its_receipt_and_a_touched_one_is_not(tmp_path):
    env = make_env(tmp_path)
    dirs = dirs_of(tmp_path)
    root = fake_kit(dirs)
    listed = json.loads(buildmgr(env, "toolchain", "list", "--json").stdout)["toolchains"]
    assert [(t["id"], t["intact"], t["packages"]) for t in listed] == [
        ("cuda-13.0", True, {"nvidia-cuda-nvcc": "13.0.88"})
    ]

    assert_user_error(
        buildmgr(env, "build", "cpu", "--toolchain", "cuda-13.0"),
        "--toolchain cuda-13.0 is for CUDA, and cpu has no such backend",
    )
    header = root / "include" / "cuda.h"
    header.write_bytes(b"/* CUDA */\n")  # same size, other bytes
    assert_user_error(
        buildmgr(env, "build", "cuda", "--sm", "75", "--toolchain", "cuda-13.0"),
        "toolchain cuda-13.0 was changed after it was added (include/cuda.h differs from what was added): "
        "buildmgr toolchain remove cuda-13.0 && buildmgr toolchain add cuda==13.0",
    )
    [row] = json.loads(buildmgr(env, "toolchain", "list", "--json").stdout)["toolchains"]
    assert (row["intact"], row["problem"]) == (False, "include/cuda.h differs from what was added")
    [doctor_row] = json.loads(buildmgr(env, "doctor", "--json").stdout)["toolchains"]
    assert (doctor_row["id"], doctor_row["intact"]) == ("cuda-13.0", False)
    (root / "bin" / "extra").write_bytes(b"")
    assert kits.changed(kits.find(dirs, "cuda")) == "bin/extra was added"
    (root / "bin" / "extra").unlink()

    header.write_bytes(b"/* cuda */\n")
    os.utime(header, (1, 1))  # only its mtime differs from when it was added
    assert kits.changed(kits.find(dirs, "cuda")) is None


def test_remove_refuses_a_toolchain_an_installed_build_needs_and_names_the_build(tmp_path):
    env = make_env(tmp_path)
    dirs = dirs_of(tmp_path)
    root = fake_kit(dirs)
    ref = kits.find(dirs, "cuda-13.0").receipt.ref()
    prefix = install_fake_build(dirs, ref)
    assert_user_error(
        buildmgr(env, "toolchain", "remove", "cuda-13.0"),
        f"toolchain cuda-13.0 is needed by 1 installed build(s) ({BUILD_ID}): buildmgr remove them first",
    )
    assert root.is_dir()
    # its runtime-only twin is what the build searches on a host without the toolchain: refused the same way
    fake_kit(dirs, "cuda-runtime", "13")
    assert_user_error(buildmgr(env, "toolchain", "remove", "cuda-runtime-13"), f"({BUILD_ID})")
    stale = dirs.toolchains / ".staging" / "cuda.4242.0badcafe"  # an add that was killed
    (stale / "site").mkdir(parents=True)
    gc = buildmgr(env, "gc")
    assert gc.returncode == 0 and f"removed {stale}" in gc.stderr + gc.stdout and not stale.exists()
    assert root.is_dir()  # gc never takes a toolchain

    store.remove(dirs, store.find(dirs, BUILD_ID))
    assert not prefix.exists()
    result = buildmgr(env, "toolchain", "remove", "cuda-13.0")
    assert result.returncode == 0, result.stderr
    assert not root.exists() and [a.id for a in kits.scan(dirs)[0]] == ["cuda-runtime-13"]


def test_toolchains_share_the_store_s_listing_removal_and_leftover_collection_with_builds(tmp_path):
    """One store: a folder with no receipt, one of another shape and one of a toolchain this buildmgr does not know
    are listed unreadable, never used; a removal that was killed after its rename (a hidden folder) is collected
    by gc like a build's, and `discard` leaves nothing behind."""
    env = make_env(tmp_path)
    dirs = dirs_of(tmp_path)
    good = fake_kit(dirs)
    (dirs.toolchains / "empty-1").mkdir()
    (dirs.toolchains / "garbled-1").mkdir()
    (dirs.toolchains / "garbled-1" / kits.RECEIPT).write_text("{}")
    foreign = fake_kit(dirs, "rocm", "6.4")
    half_removed = dirs.toolchains / ".removing-cuda-12.9-0badcafe"
    (half_removed / "bin").mkdir(parents=True)
    listed = buildmgr(env, "toolchain", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    reasons = {Path(u["path"]).name: u["reason"] for u in json.loads(listed.stdout)["unreadable"]}
    assert reasons == {
        "empty-1": f"no readable {kits.RECEIPT} (No such file or directory)",
        "garbled-1": "schema: expected 1, got None",
        foreign.name: "a toolchain this buildmgr does not know",
    }
    assert [t["id"] for t in json.loads(listed.stdout)["toolchains"]] == [good.name]
    gc = buildmgr(env, "gc")
    assert gc.returncode == 0 and f"removed {half_removed}" in gc.stderr + gc.stdout and not half_removed.exists()
    assert good.is_dir() and (dirs.toolchains / "empty-1").is_dir()  # gc never takes an entry
    kits.shelf(dirs).discard(good)
    assert not good.exists() and not [p for p in dirs.toolchains.iterdir() if p.name.startswith(".removing-")]


def test_an_artifact_built_with_a_toolchain_finds_its_runtime_or_is_offered_it(tmp_path):
    dirs = dirs_of(tmp_path)
    ref = ToolchainRef("cuda-13.0", "cuda", "13.0", {"nvidia-cuda-runtime": "13.0.96"})
    needed = {"libcudart.so.13": ["bin/llama-cli"], "libcublas.so.13": ["lib/libggml-cuda.so"]}
    receipt = make_receipt(BUILD_ID, toolchains=[ref.__dict__], runtime={"needed": needed})
    lacking = [lib for lib in needed if runtime.host_libraries({}, platform.machine()).find(lib) is None]
    if not lacking:
        pytest.skip("this host has the CUDA runtime and cuBLAS on its loader path")
    findings = compat.host_findings(receipt, {"LD_LIBRARY_PATH": ""}, platform.machine(), dirs)
    assert [f.message for f in findings] == [
        f"{lib} is not found on this host (needed by {needed[lib][0]}; nothing runs without it): "
        "'buildmgr toolchain add cuda-runtime==13.0' adds it"
        for lib in lacking
    ]
    fake_kit(dirs, "cuda-runtime", "13", {"lib/libcudart.so.13": b"x", "lib/libcublas.so.13": b"y"})
    assert compat.host_findings(receipt, {"LD_LIBRARY_PATH": ""}, platform.machine(), dirs) == []
    # the build's RPATH names both folders, relative to $ORIGIN, so no path of this host is in the binaries
    added = kits.find(dirs, "cuda-runtime-13")
    fake_kit(dirs)
    assert kits.runpath(dirs, (kits.find(dirs, "cuda-13.0"),)) == (
        "$ORIGIN/../../../../toolchains/cuda-13.0/lib",
        "$ORIGIN/../../../../toolchains/cuda-runtime-13/lib",
    )
    assert (dirs.builds / "label" / "id" / "bin" / "../../../../toolchains").resolve() == added.root.parent.resolve()


def fake_wheel(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """An installed wheel as pip leaves it: the files, and a dist-info whose RECORD holds each file's sha256."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = []
    for relative, data in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{relative},sha256={digest},{len(data)}")
    (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")


OFFLINE = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_FIND_LINKS": "",
           "PIP_RETRIES": "1", "PIP_TIMEOUT": "2", "PIP_NO_INDEX": ""}  # fmt: skip


def test_a_runtime_toolchain_comes_from_this_python_s_own_wheels_without_a_network(tmp_path):
    site = tmp_path / "site"
    fake_wheel(site, "nvidia-cuda-runtime", "13.0.96", {"nvidia/cu13/lib/libcudart.so.13": b"cudart"})
    fake_wheel(site, "nvidia-cublas", "13.1.0.3", {"nvidia/cu13/lib/libcublas.so.13": b"cublas",
                                                    "nvidia/cu13/lib/libcublasLt.so.13": b"cublasLt"})  # fmt: skip
    env = make_env(tmp_path, PYTHONPATH=f"{site}:{os.environ.get('PYTHONPATH', '')}", **OFFLINE)
    result = buildmgr(env, "toolchain", "add", "cuda-runtime==13.0", "--json")
    assert result.returncode == 0, result.stderr
    added = json.loads(result.stdout)
    assert (added["id"], added["packages"]) == (
        "cuda-runtime-13",
        {"nvidia-cublas": "13.1.0.3", "nvidia-cuda-runtime": "13.0.96"},
    )
    lib = Path(added["path"]) / "lib"
    assert (lib / "libcudart.so.13").read_bytes() == b"cudart" and os.readlink(
        lib / "libcudart.so"
    ) == "libcudart.so.13"
    assert sorted(p.name for p in lib.iterdir()) == [
        "libcublas.so", "libcublas.so.13", "libcublasLt.so", "libcublasLt.so.13", "libcudart.so", "libcudart.so.13"
    ]  # fmt: skip

    # a file changed since pip installed it is refused by the wheel's RECORD, and nothing is added
    (site / "nvidia/cu13/lib/libcudart.so.13").write_bytes(b"CUDART")
    other = tmp_path / "other"
    result = buildmgr(
        make_env(other) | {k: env[k] for k in ("PYTHONPATH", *OFFLINE)}, "toolchain", "add", "cuda-runtime==13.0"
    )
    assert (
        result.returncode == 2
        and "differs from what pip installed (nvidia-cuda-runtime 13.0.96's RECORD)" in result.stderr
    )
    assert kits.scan(dirs_of(other)) == ([], []) and not list((dirs_of(other).toolchains / ".staging").iterdir())


def test_cuda_12_s_runtime_wheels_are_found_under_their_cu12_names(tmp_path):
    site = tmp_path / "site"
    fake_wheel(site, "nvidia-cuda-runtime-cu12", "12.8.90", {"nvidia/cuda_runtime/lib/libcudart.so.12": b"cudart"})
    fake_wheel(site, "nvidia-cublas-cu12", "12.8.4.1", {"nvidia/cublas/lib/libcublas.so.12": b"cublas"})
    env = make_env(tmp_path, PYTHONPATH=f"{site}:{os.environ.get('PYTHONPATH', '')}", **OFFLINE)
    result = buildmgr(env, "toolchain", "add", "cuda-runtime==12.8", "--json")
    assert result.returncode == 0, result.stderr  # offline: only this Python's wheels can have served it
    added = json.loads(result.stdout)
    assert (added["id"], added["packages"]) == (
        "cuda-runtime-12",
        {"nvidia-cublas-cu12": "12.8.4.1", "nvidia-cuda-runtime-cu12": "12.8.90"},
    )
    assert (Path(added["path"]) / "lib" / "libcublas.so.12").read_bytes() == b"cublas"


@pytest.mark.parametrize(
    ("wheels", "why"),
    [
        ({"nvidia-cuda-runtime": "13.0.96"}, "nvidia-cublas is not installed"),
        (
            {"nvidia-cuda-runtime": "12.8.90", "nvidia-cublas": "13.1.0.3"},
            "nvidia-cuda-runtime 12.8.90 is not 13.0 or a newer 13.x",
        ),
    ],
)
def test_where_this_python_s_wheels_cannot_serve_the_release_it_says_why_before_pip(tmp_path, wheels, why):
    site = tmp_path / "site"
    for name, version in wheels.items():
        fake_wheel(site, name, version, {f"nvidia/cu13/lib/lib{name}.so": name.encode()})
    env = make_env(tmp_path, PYTHONPATH=f"{site}:{os.environ.get('PYTHONPATH', '')}", **OFFLINE)
    result = buildmgr(env, "toolchain", "add", "cuda-runtime==13.0")
    assert result.returncode == 2, result.stderr  # offline: pip was asked, and failed
    lines = result.stderr.splitlines()
    said = [
        i
        for i, line in enumerate(lines)
        if f"this Python's installed wheels cannot serve cuda-runtime==13.0: {why}" in line
    ]
    failed = [i for i, line in enumerate(lines) if "pip could not reach its package index" in line]
    assert said and failed and said[0] < failed[0], result.stderr
    assert kits.scan(dirs_of(tmp_path)) == ([], [])


def test_without_a_network_pip_s_failure_is_one_clear_line_and_nothing_is_added(tmp_path):
    result = buildmgr(make_env(tmp_path, **OFFLINE), "toolchain", "add", "cuda==13.0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("buildmgr: error: pip could not reach its package index for cuda-toolkit (no network?)")
    dirs = dirs_of(tmp_path)
    assert kits.scan(dirs) == ([], []) and not list((dirs.toolchains / ".staging").iterdir())


def test_the_matrix_builds_cuda_on_a_stock_runner_with_the_pypi_toolkit(tmp_path):
    known = all_recipes(dirs_of(tmp_path))
    request = MatrixRequest(("universal+cuda", "universal+vulkan"), {"--sm": ("75,90",)})
    [system_cuda, vulkan] = matrix(request, known, 11312, "0c1e570")[0]
    assert system_cuda["container"].startswith("nvidia/cuda:") and system_cuda["toolchains"] == ""
    pypi = MatrixRequest(request.recipes, request.arch, toolchain="pypi")
    [pypi_cuda, pypi_vulkan] = matrix(pypi, known, 11312, "0c1e570")[0]
    assert (pypi_cuda["runner"], pypi_cuda["container"], pypi_cuda["toolchains"]) == ("ubuntu-24.04", "", "cuda==13.0")
    assert pypi_cuda["args"][-2:] == ["--toolchain", "cuda"] and pypi_cuda["artifact"] == system_cuda["artifact"]
    assert pypi_vulkan == vulkan  # only CUDA comes from PyPI


def test_a_receipt_keeps_the_toolchains_a_build_was_made_with():
    ref = ToolchainRef("cuda-13.0", "cuda", "13.0", {"nvidia-cuda-nvcc": "13.0.88"})
    receipt = make_receipt(BUILD_ID, toolchains=[ref.__dict__])
    assert type(receipt).from_text(receipt.to_text()).toolchains == (ref,)
    assert make_receipt(BUILD_ID).toolchains == ()  # a receipt from before toolchains could be added
    assert "toolchains" not in make_receipt(BUILD_ID).to_json()  # and written back as it was


@pytest.mark.parametrize(
    ("ref", "offer"),
    [
        ("nosuch", "'buildmgr toolchain list' shows what is added"),  # issue #35: it offered 'toolchain add nosuch'
        ("cuda-13.0", "'buildmgr toolchain add cuda' adds one"),
        ("cuda-runtime-13.0", "'buildmgr toolchain add cuda-runtime' adds one"),
    ],
)
def test_removing_what_is_not_added_offers_only_what_exists(tmp_path, ref, offer):
    assert_user_error(buildmgr(make_env(tmp_path), "toolchain", "remove", ref), f"no toolchain {ref!r} is added", offer)
