"""Artifacts: the CI matrix, byte-identical packages, and install-artifact's checks of the archive and the host.

The archives here are made by buildmgr's own `package` from small prefixes, then altered the way a tampered or
hostile file would be. The real cpu and Vulkan artifacts are built, packaged and installed in test_cpu_build and
test_vulkan_build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import COMMIT, assert_user_error, buildmgr, make_receipt

from buildmgr import store
from buildmgr.artifacts import archive as archives
from buildmgr.artifacts import compat, reproduce
from buildmgr.artifacts import matrix as matrices
from buildmgr.artifacts import unpack as unpacking
from buildmgr.artifacts.names import cpu_arch_of
from buildmgr.backends.cuda import device_code as cuda_device_code
from buildmgr.backends.hip import device_code as hip_device_code
from buildmgr.building import runtime
from buildmgr.building.options import all_recipes
from buildmgr.core.config import Dirs
from buildmgr.core.errors import CannotRunHere, UserError
from buildmgr.core.progress import Reporter
from buildmgr.store.receipt import Receipt

BUILD_ID = "cpu-0123abcd"
VERSION_SCRIPT = "#!/bin/sh\necho 'version: 0.5.0-dev (build 11312, commit 0c1e570)'\n"


def fake_build(root: Path, tool: str = VERSION_SCRIPT, **runtime_needs) -> store.Build:
    """A prefix with a receipt of the shape buildmgr writes: enough to package, and to install up to the smoke run."""
    prefix = root / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    for name in ("llama-cli", "llama-bench"):
        (prefix / "bin" / name).write_text(tool)
        (prefix / "bin" / name).chmod(0o755)
    (prefix / "lib" / "libllama.so.0.5.0").write_bytes(b"not really a library")
    os.symlink("libllama.so.0.5.0", prefix / "lib" / "libllama.so.0")
    (prefix / "LICENSE").write_text("MIT\n")
    receipt = make_receipt(BUILD_ID, runtime=runtime_needs, files=store.file_hashes(prefix))
    store.write_receipt(prefix, receipt)
    return store.Build(BUILD_ID, prefix, receipt)


def packaged(tmp_path: Path, **kwargs) -> Path:
    return archives.package(fake_build(tmp_path / "src", **kwargs), tmp_path / "dist", {}).archive


def repack(archive: Path, change) -> Path:
    """Rewrite an archive entry by entry through `change(info, data) -> [(info, data)]`, with a matching .sha256."""
    rows = []
    with tarfile.open(archive, "r:gz") as tar:
        for info in tar.getmembers():
            handle = tar.extractfile(info) if info.isfile() else None
            rows += change(info, handle.read() if handle else b"")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in rows:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    archive.write_bytes(buffer.getvalue())
    archive.with_name(archive.name + ".sha256").write_text(
        f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {archive.name}\n"
    )
    return archive


def install(tmp_env: dict[str, str], archive: Path):
    return buildmgr(tmp_env, "install-artifact", str(archive))


def assert_nothing_installed(tmp_env: dict[str, str]) -> None:
    data = Path(tmp_env["XDG_DATA_HOME"])
    assert not data.exists() or not any(p for p in data.rglob("*") if p.is_file() and p.suffix != ".lock")


# --- package --------------------------------------------------------------------------------------------------


def test_two_packages_of_one_build_are_byte_identical_and_say_nothing_of_where_they_were_made(tmp_path):
    build = fake_build(tmp_path / "src")
    first = archives.package(build, tmp_path / "a", {})
    os.utime(build.prefix / "LICENSE", (1, 1))  # a file's own time never reaches the archive
    second = archives.package(build, tmp_path / "b", {})
    assert first.archive.name == f"llama-b11312-bin-linux-cpu-{cpu_arch_of(platform.machine())}.tar.gz"
    assert first.archive.read_bytes() == second.archive.read_bytes()
    raw = first.archive.read_bytes()
    assert raw[3] & 0x08 == 0 and struct.unpack("<I", raw[4:8])[0] == 0  # gzip: no file name, mtime 0
    with tarfile.open(first.archive) as tar:
        members = tar.getmembers()
    top = first.archive.name.removesuffix(".tar.gz")
    assert [m.name for m in members] == sorted(m.name for m in members) and members[0].name == top
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 1790812800)}
    modes = {m.name.split("/", 1)[-1]: m.mode for m in members if not m.issym()}
    assert modes["bin/llama-cli"] == 0o755 and modes["LICENSE"] == 0o644 and modes[top] == 0o755
    assert all(not m.name.startswith("/") and ".." not in m.name for m in members)
    assert first.checksum.read_text() == f"{first.sha256}  {first.archive.name}\n"
    check = subprocess.run(
        ["sha256sum", "-c", first.checksum.name], cwd=first.archive.parent, capture_output=True, check=False
    )
    assert check.returncode == 0, check.stderr


def test_source_date_epoch_sets_every_entry_time(tmp_path):
    build = fake_build(tmp_path / "src")
    archive = archives.package(build, tmp_path / "a", {"SOURCE_DATE_EPOCH": "1700000000"}).archive
    with tarfile.open(archive) as tar:
        assert {m.mtime for m in tar.getmembers()} == {1700000000}
    with pytest.raises(UserError, match="SOURCE_DATE_EPOCH"):
        archives.package(build, tmp_path / "b", {"SOURCE_DATE_EPOCH": "yesterday"})


def test_the_manifest_lists_every_file_and_sha256sum_can_check_it(tmp_path):
    archive = packaged(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    top = out / archive.name.removesuffix(".tar.gz")
    listed = {line.split("  ", 1)[1] for line in (top / archives.MANIFEST).read_text().splitlines()}
    files = {str(p.relative_to(top)) for p in top.rglob("*") if p.is_file() and not p.is_symlink()}
    assert listed == files - {archives.MANIFEST}
    assert subprocess.run(["sha256sum", "--quiet", "-c", archives.MANIFEST], cwd=top, check=False).returncode == 0


def test_a_prefix_changed_after_its_build_is_not_packaged(tmp_path):
    build = fake_build(tmp_path / "src")
    (build.prefix / "bin" / "llama-cli").write_text("#!/bin/sh\necho changed\n")
    with pytest.raises(Exception, match="no longer matches its receipt"):
        archives.package(build, tmp_path / "dist", {})
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


def test_package_of_a_build_that_does_not_exist_is_one_line(tmp_env, tmp_path):
    result = buildmgr(tmp_env, "package", "cuda", "-o", str(tmp_path / "dist"))
    assert_user_error(result, "no installed build 'cuda'")
    assert not (tmp_path / "dist").exists()


# --- install-artifact: the archive -----------------------------------------------------------------------------


def test_a_checksum_mismatch_is_refused_before_anything_is_written(tmp_env, tmp_path):
    archive = packaged(tmp_path)
    checksum = archive.with_name(archive.name + ".sha256")
    checksum.write_text("0" * 64 + f"  {archive.name}\n")
    assert_user_error(install(tmp_env, archive), "checksum mismatch")
    assert_nothing_installed(tmp_env)
    checksum.unlink()
    assert_user_error(install(tmp_env, archive), f"no {checksum.name} beside it")


def test_a_tampered_archive_with_a_fresh_checksum_fails_the_manifest(tmp_env, tmp_path):
    def swap_tool(info, data):
        return [(info, b"#!/bin/sh\necho pwned\n" if info.name.endswith("bin/llama-cli") else data)]

    archive = repack(packaged(tmp_path), swap_tool)
    assert_user_error(install(tmp_env, archive), "do not match its MANIFEST.sha256", "bin/llama-cli")
    assert_nothing_installed(tmp_env)


def test_a_manifest_rewritten_to_match_still_disagrees_with_the_receipt(tmp_env, tmp_path):
    evil = b"#!/bin/sh\necho pwned\n"

    def swap_tool_and_manifest(info, data):
        if info.name.endswith("bin/llama-cli"):
            return [(info, evil)]
        if info.name.endswith(archives.MANIFEST):
            lines = [
                f"{hashlib.sha256(evil).hexdigest()}  bin/llama-cli" if line.endswith("  bin/llama-cli") else line
                for line in data.decode().splitlines()
            ]
            return [(info, ("\n".join(lines) + "\n").encode())]
        return [(info, data)]

    archive = repack(packaged(tmp_path), swap_tool_and_manifest)
    assert_user_error(install(tmp_env, archive), "do not match its receipt", "bin/llama-cli")
    assert_nothing_installed(tmp_env)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("../escape", "'..' in path"),
        ("/etc/evil", "absolute path"),
    ],
)
def test_entries_that_leave_the_tree_are_refused(tmp_env, tmp_path, entry, why):
    def add_entry(info, data):
        rows = [(info, data)]
        if info.name.endswith(archives.MANIFEST):
            rows.append((tarfile.TarInfo(entry), b"x"))
        return rows

    archive = repack(packaged(tmp_path), add_entry)
    assert_user_error(install(tmp_env, archive), "unsafe entry", why)
    assert_nothing_installed(tmp_env)
    assert not (tmp_path / "escape").exists()


def test_a_link_that_leaves_the_tree_is_refused(tmp_env, tmp_path):
    def add_link(info, data):
        rows = [(info, data)]
        if info.name.endswith(archives.MANIFEST):
            link = tarfile.TarInfo(info.name.rsplit("/", 1)[0] + "/lib/libc.so.6")
            link.type, link.linkname = tarfile.SYMTYPE, "../../../../lib/x86_64-linux-gnu/libc.so.6"
            rows.append((link, b""))
        return rows

    archive = repack(packaged(tmp_path), add_link)
    assert_user_error(install(tmp_env, archive), "unsafe entry", "leaves the tree")
    assert_nothing_installed(tmp_env)


def _top(info: tarfile.TarInfo) -> str:
    return info.name.split("/", 1)[0]


@pytest.mark.parametrize(
    ("hostile", "why"),
    [
        ("parent", "'..' in path"),
        ("absolute", "absolute path"),
        ("link out", "leaves the tree"),
        ("through a link", "not a folder written before it"),
        ("twice", "comes twice"),
        ("link chain", "leads out of the tree"),
    ],
)
def test_the_one_pass_extraction_writes_nothing_outside_staging(tmp_path, hostile, why):
    """install --from extracts as it checks (no pass before it): each hostile entry is refused there too, and
    nothing is written outside the staging dir, even through a link that stays inside the tree."""
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = packaged(tmp_path)
    with tarfile.open(archive) as tar:
        last = tar.getmembers()[-1].name  # after every folder of the tree

    def add(info, data):
        rows = [(info, data)]
        if info.name != last:
            return rows
        top = _top(info)
        entry = tarfile.TarInfo(f"{top}/lib/x")
        if hostile == "parent":
            entry.name = f"{top}/../outside/x"
        elif hostile == "absolute":
            entry.name = str(outside / "x")
        elif hostile == "link out":
            entry.type, entry.linkname = tarfile.SYMTYPE, "../../outside"
        elif hostile == "through a link":  # a link inside the tree, then a file below it
            link = tarfile.TarInfo(f"{top}/lib/into-bin")
            link.type, link.linkname = tarfile.SYMTYPE, "../bin"
            rows.append((link, b""))
            entry.name = f"{top}/lib/into-bin/llama-cli"
        elif hostile == "twice":  # the same file again, after the first was written
            entry.name = f"{top}/bin/llama-cli"
        elif hostile == "link chain":  # each stays in the tree alone; followed, the second leads out
            here = tarfile.TarInfo(f"{top}/lib/here")
            here.type, here.linkname = tarfile.SYMTYPE, "."
            rows.append((here, b""))
            entry.type, entry.linkname = tarfile.SYMTYPE, "here/here/../../../outside"
            entry.name = f"{top}/lib/out"
        rows.append((entry, b"x"))
        return rows

    repack(archive, add)
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(UserError, match=re.escape(why)):
        unpacking.unpack(archive, hashlib.sha256(archive.read_bytes()).hexdigest(), staging)
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "x").exists()


def test_the_one_pass_extraction_refuses_another_archive_than_the_one_checked(tmp_path):
    """The digest checked before (the download's) must still be the archive's while it is extracted."""
    archive = packaged(tmp_path)
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(UserError, match=r"checksum mismatch .* it was checked as 000000000000"):
        unpacking.unpack(archive, "0" * 64, staging)
    (tmp_path / "again").mkdir()
    done = unpacking.unpack(archive, hashlib.sha256(archive.read_bytes()).hexdigest(), tmp_path / "again")
    assert store.file_hashes(tmp_path / "again") == done.receipt.files
    assert os.access(tmp_path / "again" / "bin" / "llama-cli", os.X_OK)


def test_an_archive_without_a_receipt_is_not_an_artifact(tmp_env, tmp_path):
    def drop_receipt(info, data):
        return [] if info.name.endswith(store.RECEIPT) else [(info, data)]

    archive = repack(packaged(tmp_path), drop_receipt)
    assert_user_error(install(tmp_env, archive), f"no {store.RECEIPT}")
    assert_nothing_installed(tmp_env)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r | {"id": "../../../../tmp/owned"}, "id: '../../../../tmp/owned' is not a safe id"),
        (lambda r: {k: v for k, v in r.items() if k != "host"}, "host is missing"),
        (lambda r: r | {"smoke": r["smoke"] | {"passed": "yes"}}, "smoke.passed: expected true or false"),
        (lambda r: r | {"runtime": r["runtime"] | {"needed": {"libc.so.6": "bin/x"}}}, "runtime.needed.libc.so.6"),
    ],
    ids=["outside the data dir", "no host", "smoke not a bool", "needed not a list"],
)
def test_a_receipt_of_the_wrong_shape_is_refused_with_the_field_named(tmp_env, tmp_path, change, says):
    """Even with the manifest rewritten to match: the receipt's own shape is checked, field by field."""

    def hostile(info, data):
        if not info.name.endswith(store.RECEIPT):
            return [(info, data)]
        return [(info, json.dumps(change(json.loads(data))).encode())]

    archive = packaged(tmp_path)
    repack(archive, hostile)
    with tarfile.open(archive) as tar:
        receipt_bytes = next(tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(store.RECEIPT))

    def matching_manifest(info, data):
        if not info.name.endswith(archives.MANIFEST):
            return [(info, data)]
        lines = [
            f"{hashlib.sha256(receipt_bytes).hexdigest()}  {store.RECEIPT}" if line.endswith(store.RECEIPT) else line
            for line in data.decode().splitlines()
        ]
        return [(info, ("\n".join(lines) + "\n").encode())]

    repack(archive, matching_manifest)
    assert_user_error(install(tmp_env, archive), "is not a buildmgr receipt", says)
    assert_nothing_installed(tmp_env)
    assert not Path("/tmp/owned").exists()


def test_a_smoke_failure_on_this_host_installs_nothing_and_leaves_no_staging(tmp_env, tmp_path):
    archive = packaged(tmp_path, tool="#!/bin/sh\nexit 3\n")
    result = install(tmp_env, archive)
    assert result.returncode == 1, result.stderr
    assert "smoke run failed" in result.stderr and "Traceback" not in result.stderr
    assert json.loads(buildmgr(tmp_env, "list", "--json").stdout)["builds"] == []
    staging = Path(tmp_env["XDG_DATA_HOME"]) / "buildmgr" / "builds" / ".staging"
    assert not staging.exists() or not any(staging.iterdir())


# --- install-artifact: the host ---------------------------------------------------------------------------------


def test_a_glibc_newer_than_this_hosts_blocks_the_install_with_the_file_that_needs_it(tmp_env, tmp_path):
    archive = packaged(tmp_path, glibc="99.1", glibc_file="bin/llama-cli")
    result = install(tmp_env, archive)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"this host's glibc is {runtime.host_glibc()}, and bin/llama-cli needs GLIBC_99.1" in result.stderr
    assert_nothing_installed(tmp_env)


def test_a_missing_library_is_named_with_where_it_comes_from(tmp_path):
    receipt = fake_build(
        tmp_path, needed={"libvulkan.so.1": ["lib/libggml-vulkan.so"], "libnope.so.9": ["bin/x"]}
    ).receipt
    findings = compat.host_findings(
        receipt, {"LD_LIBRARY_PATH": ""}, platform.machine(), Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "f")
    )
    by_library = {f.message.split(" ", 1)[0]: f for f in findings}
    assert (
        by_library["libnope.so.9"].severity == "error"
        and "nothing runs without it" in by_library["libnope.so.9"].message
    )
    if runtime.host_libraries({}, platform.machine()).find("libvulkan.so.1") is None:
        assert "apt libvulkan1" in by_library["libvulkan.so.1"].message
    else:
        assert "libvulkan.so.1" not in by_library


def test_a_library_needed_only_by_a_loadable_backend_module_is_a_warning(tmp_path):
    """A library no host has, so the finding is there on every host (with or without a GPU driver)."""
    build = fake_build(tmp_path, needed={"libnothere.so.7": ["lib/libggml-cuda.so"]})
    recipe = dataclasses.replace(build.receipt.recipe, resolved_defines={"GGML_BACKEND_DL": "ON"})
    receipt = dataclasses.replace(build.receipt, recipe=recipe)
    [found] = compat.host_findings(
        receipt, {"LD_LIBRARY_PATH": ""}, platform.machine(), Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "f")
    )
    assert found.severity == "warning" and "that backend will not load" in found.message
    compat.require_runnable([found], "x.tar.gz")  # a warning does not block
    [blocking] = compat.host_findings(
        build.receipt, {"LD_LIBRARY_PATH": ""}, platform.machine(), Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "f")
    )
    assert blocking.severity == "error" and "nothing runs without it" in blocking.message
    with pytest.raises(CannotRunHere, match=re.escape("this host cannot run x.tar.gz: libnothere.so.7 is not found")):
        compat.require_runnable([blocking], "x.tar.gz")


def test_an_artifact_for_another_cpu_is_refused(tmp_path):
    receipt = fake_build(tmp_path).receipt
    other = "aarch64" if platform.machine() == "x86_64" else "x86_64"
    [found] = compat.host_findings(receipt, {}, other, Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "f"))
    assert (
        found.severity == "error"
        and found.message == f"built for {platform.machine().lower()}, and this host is {other}"
    )


def test_cuda_kernels_sass_runs_on_newer_minors_ptx_jits_upward_and_nothing_else_runs():
    assert cuda_device_code.kernel_findings(["sm_80"], ["8.6"]) == []
    [jit] = cuda_device_code.kernel_findings(["sm_80", "compute_80"], ["9.0"])
    assert (
        jit.severity == "warning"
        and "JIT-compile compute_80" in jit.message
        and jit.fix.startswith("build with --sm 90")
    )
    [none] = cuda_device_code.kernel_findings(["sm_90", "compute_90"], ["8.6"])
    assert (
        none.severity == "error" and "no kernel image is available" in none.message and none.fix == "build with --sm 86"
    )
    assert cuda_device_code.kernel_findings(["sm_86", "sm_90"], ["8.9", "9.0"]) == []
    assert hip_device_code.kernel_findings(["gfx1100"], ["gfx1100"]) == []
    assert hip_device_code.kernel_findings(["gfx1100"], ["gfx1151"])[0].fix == "build with --gfx gfx1151"


def test_gpu_code_is_read_per_backend_from_the_sections_of_a_real_elf_file(tmp_path):
    """An object file with a `.nv_fatbin` and a `.hip_fatbin` section (added by objcopy): each backend's reader
    finds its own code, and the receipt keeps it per backend."""
    source = tmp_path / "k.c"
    source.write_text("int k(void) { return 1; }\n")
    prefix = tmp_path / "prefix" / "lib"
    prefix.mkdir(parents=True)
    obj = prefix / "libk.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(obj), str(source)], check=True)
    (tmp_path / "nv").write_bytes(_fatbin([(2, 90), (1, 90), (2, 80)]))
    (tmp_path / "hip").write_bytes(
        b"__CLANG_OFFLOAD_BUNDLE__ hipv4-amdgcn-amd-amdhsa--gfx1100 hipv4-amdgcn-amd-amdhsa--gfx1151"
    )
    for section, blob in ((".nv_fatbin", "nv"), (".hip_fatbin", "hip")):
        subprocess.run(["objcopy", "--add-section", f"{section}={tmp_path / blob}", str(obj)], check=True)
    needs = runtime.scan_prefix(tmp_path / "prefix")
    assert needs["device_code"] == {"CUDA": ["sm_80", "sm_90", "compute_90"], "ROCm": ["gfx1100", "gfx1151"]}
    receipt = make_receipt("cuda-0123abcd", runtime=needs)
    assert receipt.runtime.device_code["CUDA"] == ("sm_80", "sm_90", "compute_90")


def test_a_schema_1_receipt_from_the_h200_still_reads_with_its_gpu_code():
    """On the H200 (2026-11-30): the --sm 80 build's receipt (schema 1, each backend's code in its own field) had
    sm_80 SASS and compute_80 PTX, as cuobjdump listed; read now, the code is CUDA's, and the warning install-artifact
    printed on that H200 (capability 9.0) is what the check says today."""
    fixtures = Path(__file__).parent / "fixtures" / "h200x2" / "artifacts"
    schema_1 = json.loads((fixtures / "runtime-cuda-sm80.json").read_text())["runtime"]
    assert "device_code" not in schema_1 and "sm_80" in (fixtures / "cuobjdump-cuda-sm80.txt").read_text()
    receipt = Receipt.from_json(
        json.loads(json.dumps(make_receipt("cuda-0123abcd").to_json() | {"schema": 1, "runtime": schema_1}))
    )
    assert receipt.runtime.device_code == {"CUDA": ("sm_80", "compute_80")}
    [warning] = cuda_device_code.kernel_findings(["sm_80", "compute_80"], ["9.0"])
    installed = json.loads((fixtures / "install-cuda-sm80.json").read_text())
    assert installed["warnings"][0] == warning.text()


# --- ELF facts --------------------------------------------------------------------------------------------------


def _fatbin(entries: list[tuple[int, int]]) -> bytes:
    body = b""
    for kind, arch in entries:
        payload = b"\0" * 24
        header = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload)) + b"\0" * 12 + struct.pack("<I", arch)
        body += header.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fatbin_entries_give_sass_and_ptx_archs_across_containers():
    data = _fatbin([(2, 80), (1, 80)]) + b"\0" * 8 + _fatbin([(2, 90)])
    assert cuda_device_code.fatbin_archs(data) == ({80, 90}, {80})
    assert cuda_device_code.fatbin_archs(b"\0" * 64) == (set(), set())


@pytest.mark.skipif(not os.environ.get("BUILDMGR_TEST_CUDA_HOME"), reason="run ci/test.sh to provision nvcc")
def test_archs_read_from_a_real_nvcc_library_are_the_ones_compiled(tmp_path):
    nvcc = Path(os.environ["BUILDMGR_TEST_CUDA_HOME"]) / "bin" / "nvcc"
    (tmp_path / "k.cu").write_text("__global__ void k(int *x) { *x = 1; }\nvoid launch(int *x) { k<<<1, 1>>>(x); }\n")
    command = [str(nvcc), "-shared", "-Xcompiler", "-fPIC", str(tmp_path / "k.cu"), "-o", str(tmp_path / "libk.so")]
    command += ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
    subprocess.run(command, check=True, capture_output=True)
    (tmp_path / "prefix" / "lib").mkdir(parents=True)
    shutil.copy(tmp_path / "libk.so", tmp_path / "prefix" / "lib")
    needs = runtime.scan_prefix(tmp_path / "prefix")
    assert needs["device_code"] == {"CUDA": ["sm_75", "sm_90", "compute_90"]}


def test_glibc_floor_and_needed_libraries_come_from_the_elf_files(tmp_path):
    (tmp_path / "prefix" / "bin").mkdir(parents=True)
    shutil.copy(shutil.which("sha256sum"), tmp_path / "prefix" / "bin")
    needs = runtime.scan_prefix(tmp_path / "prefix")
    assert "libc.so.6" in needs["needed"] and needs["needed"]["libc.so.6"] == ["bin/sha256sum"]
    from packaging.version import Version

    assert Version("2.2") <= Version(needs["glibc"]) <= runtime.host_glibc()


def test_ldconfig_lines_of_another_abi_are_not_this_hosts_libraries():
    text = (
        "\tlibvulkan.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libvulkan.so.1\n"
        "\tlibfoo.so.2 (libc6) => /lib/i386-linux-gnu/libfoo.so.2\n"
    )
    assert runtime.parse_ldconfig(text, "x86_64") == {"libvulkan.so.1": "/lib/x86_64-linux-gnu/libvulkan.so.1"}


# --- matrix -----------------------------------------------------------------------------------------------------


def known(tmp_path: Path):
    from buildmgr.core.config import Dirs

    return all_recipes(Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "cfg"))


def test_matrix_fans_out_per_arch_and_leaves_out_what_cannot_build_with_a_reason(tmp_path):
    request = matrices.MatrixRequest(
        ("cpu", "universal+cuda+vulkan", "metal", "hip", "cuda"), {"--sm": ("86,89", "90"), "--gfx": ("gfx1100",)}
    )
    entries, skipped = matrices.matrix(request, known(tmp_path), 11312, COMMIT)
    names = [e["artifact"] for e in entries]
    assert names == [
        "llama-b11312-bin-linux-cpu-x64.tar.gz",
        "llama-b11312-bin-linux-cuda-universal-vulkan-sm86_89-x64.tar.gz",
        "llama-b11312-bin-linux-cuda-universal-vulkan-sm90-x64.tar.gz",
        "llama-b11312-bin-linux-hip-gfx1100-x64.tar.gz",
    ]
    cuda_entry = entries[1]
    assert cuda_entry["args"] == ["build", "cuda+universal+vulkan", "--sm", "86,89"]
    assert cuda_entry["container"].startswith("nvidia/cuda:") and cuda_entry["setup"] == "cuda,vulkan"
    assert len({e["ccache_key"] for e in entries}) == len(entries)
    reasons = {s["recipe"]: s["reason"] for s in skipped}
    assert reasons.pop("metal") == "Metal does not build on linux"
    hip_entry = entries[3]
    assert (hip_entry["container"], hip_entry["setup"], hip_entry["args"]) == (
        "debian:sid",
        "rocm",
        ["build", "hip", "--gfx", "gfx1100"],
    )
    # the workflow's one provisioning step installs what each backend's package names for its setup
    assert (hip_entry["apt"], hip_entry["apt_options"]) == (
        "hipcc libhipblas-dev librocblas-dev rocm-cmake",
        "-o Acquire::Check-Valid-Until=false",
    )
    assert (cuda_entry["apt"], cuda_entry["apt_options"]) == ("libvulkan-dev glslc spirv-headers", "")
    assert (entries[0]["apt"], entries[0]["setup"]) == ("", "")
    without_gfx = matrices.MatrixRequest(("hip",), {"--sm": ("90",)})
    assert matrices.matrix(without_gfx, known(tmp_path), 11312, COMMIT)[1][0]["reason"] == (
        "it has HIP: name the targets with --gfx"
    )
    assert "loads libcuda.so.1 at start, which a GPU-less runner lacks" in reasons.pop("cuda")
    assert reasons == {}


def test_matrix_names_match_what_package_makes(tmp_path):
    here = cpu_arch_of(platform.machine())
    [entry], _ = matrices.matrix(matrices.MatrixRequest(("cpu",), cpu_archs=(here,)), known(tmp_path), 11312, COMMIT)
    build = fake_build(tmp_path)
    assert archives.receipt_stem(build.receipt) + ".tar.gz" == entry["artifact"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["nope"], "unknown recipe 'nope'"),
        (["universal+cuda", "--sm", "61"], "cannot build compute capability 61"),
        (["universal+cuda", "--sm", "native"], "a CI runner has none"),
        (["universal+cuda", "--sm", "eighty"], "is not a CUDA compute capability"),
        (["hip", "--gfx", "gfx12"], "gfx12"),
        (["metal"], "nothing in this matrix can be built"),
    ],
)
def test_matrix_bad_input_is_one_line(tmp_env, args, fragment):
    assert_user_error(buildmgr(tmp_env, "matrix", *args), fragment)


def test_matrix_for_github_is_one_line_of_json_and_reasons_go_to_stderr(tmp_env):
    result = buildmgr(tmp_env, "matrix", "cpu", "cuda", "--format", "github")
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert [e["recipe"] for e in json.loads(line)["include"]] == ["cpu"]
    assert "left out cuda on linux/x64: it has CUDA: name the capabilities with --sm" in result.stderr


# --- CI output ---------------------------------------------------------------------------------------------------


def test_github_groups_go_to_stderr_so_stdout_stays_json(capsys):
    reporter = Reporter(github=True, in_ci=True)
    with reporter.phase("configure"):
        pass
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "::group::configure" in captured.err and "::endgroup::" in captured.err


# --- the workflow ------------------------------------------------------------------------------------------------

WORKFLOW = Path(__file__).parent.parent / "ci" / "workflows" / "artifacts.yml"


def test_the_workflow_is_valid_for_github_actions():
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    audit = subprocess.run(
        [str(Path(sys.executable).parent / "zizmor"), "--offline", "--no-progress", str(WORKFLOW)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_the_workflow_signs_the_index_again_well_before_hosts_refuse_it():
    """A signed index expires (issue #50): a workflow that publishes only on tags would leave every host refusing
    the repository 30 days after a release. On its weekly schedule it signs the index alone, building nothing."""
    import yaml

    from buildmgr.artifacts.index import EXPIRES_DAYS

    workflow = yaml.safe_load(WORKFLOW.read_text())
    [cron] = [entry["cron"] for entry in workflow[True]["schedule"]]  # YAML 1.1 reads `on:` as True
    day, month, weekday = cron.split()[2:]
    assert (day, month) == ("*", "*") and weekday.isdigit() and 7 < EXPIRES_DAYS  # weekly
    assert workflow["jobs"]["matrix"]["if"] == "github.event_name != 'schedule'"
    publish = workflow["jobs"]["publish"]
    assert "github.event_name == 'schedule'" in publish["if"] and "!cancelled()" in publish["if"]
    script = next(step["run"] for step in publish["steps"] if "buildmgr publish" in step.get("run", ""))
    assert 'buildmgr publish --to "$to" --sign ci\n' in script


def test_the_workflow_matrix_comes_from_buildmgr_matrix_and_uses_only_keys_it_prints(tmp_env):
    import re

    import yaml

    workflow = yaml.safe_load(WORKFLOW.read_text())
    steps = workflow["jobs"]["matrix"]["steps"]
    assert any("buildmgr matrix" in step.get("run", "") and "--format github" in step.get("run", "") for step in steps)
    build = workflow["jobs"]["build"]
    assert "fromJSON(needs.matrix.outputs.matrix)" in str(build["strategy"]["matrix"])
    result = buildmgr(tmp_env, "matrix", "cpu", "vulkan", "universal+cuda+vulkan", "--sm", "90", "--format", "github")
    printed = set().union(*(entry.keys() for entry in json.loads(result.stdout)["include"]))
    used = set(re.findall(r"(?<![\w.])matrix\.(\w+)", WORKFLOW.read_text()))
    assert used and used <= printed, used - printed


# --- verify ------------------------------------------------------------------------------------------------------

NONCE_TREE = """\
string(RANDOM LENGTH 16 nonce)
add_compile_definitions(NONCE="${nonce}")
"""


def git_tree(root: Path, nondeterministic: bool) -> str:
    """The fake llama.cpp tree as a git repository; with a nonce that every configure draws anew, if asked."""
    from conftest import WORKS, write_fake_tree

    tool = WORKS.replace('"version: 9 (fake)\\n"', '"version: 9 (%s, commit %s)\\n", NONCE, COMMIT')
    tree = write_fake_tree(root, tool)
    cmakelists = tree / "CMakeLists.txt"
    nonce = (NONCE_TREE if nondeterministic else 'add_compile_definitions(NONCE="fixed")\n') + (
        'add_compile_definitions(COMMIT="${LLAMA_BUILD_COMMIT}")\n'
    )
    cmakelists.write_text(cmakelists.read_text().replace("add_subdirectory(ggml)", nonce + "add_subdirectory(ggml)"))
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run([*git, *command], check=True)
    return f"{tree}@main"


def package_of(env: dict[str, str], tmp_path: Path, source: str) -> Path:
    built = buildmgr(env, "build", "--source", source, "--json")
    assert built.returncode == 0, built.stderr
    packaged = buildmgr(env, "package", json.loads(built.stdout)["id"], "-o", str(tmp_path / "dist"), "--json")
    assert packaged.returncode == 0, packaged.stderr
    return Path(json.loads(packaged.stdout)["archive"])


def test_verify_rebuilds_a_git_artifact_and_finds_it_identical(tmp_env, tmp_path):
    archive = package_of(tmp_env, tmp_path, git_tree(tmp_path / "src", nondeterministic=False))
    result = buildmgr(tmp_env, "verify", str(archive), "--cold", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["differ"] == [] and report["files"] == 5  # a tool per recipe target
    # cold: cpu.c and tool.c compiled afresh; the only hits are tool.c's repeats (one per tool) within this rebuild
    assert report["ccache"]["misses"] >= 2 and report["ccache"]["hits"] <= 4
    assert not (Path(tmp_env["XDG_CACHE_HOME"]) / "buildmgr" / "verify").exists()  # scratch removed


def test_verify_of_a_build_that_does_not_reproduce_lists_the_files_that_differ(tmp_env, tmp_path):
    archive = package_of(tmp_env, tmp_path, git_tree(tmp_path / "src", nondeterministic=True))
    result = buildmgr(tmp_env, "verify", str(archive), "--cold")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = next(line for line in result.stderr.splitlines() if "is not what its receipt builds" in line)
    assert "bin/llama-cli" in line and "bin/llama-bench" in line


def test_verify_of_something_that_is_not_an_artifact_is_one_line(tmp_env, tmp_path):
    bogus = tmp_path / "llama-b1-bin-linux-cpu-x64.tar.gz"
    bogus.write_bytes(b"not a tar")
    bogus.with_name(bogus.name + ".sha256").write_text(f"{hashlib.sha256(b'not a tar').hexdigest()}  {bogus.name}\n")
    assert_user_error(buildmgr(tmp_env, "verify", str(bogus)), "not a readable .tar.gz")
    assert_user_error(buildmgr(tmp_env, "verify", str(tmp_path / "none.tar.gz")), "no such artifact file")


def test_verify_needs_a_source_it_can_fetch_again(tmp_path):
    from buildmgr.core.config import Dirs

    known_recipes = all_recipes(Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "cfg"))
    defines = {"GGML_NATIVE": "OFF", "CMAKE_CUDA_ARCHITECTURES": "86-real;89"}
    pinned = make_receipt(source={"origin": "pypi:llama-cpp-python==0.3.36"}, recipe={"resolved_defines": defines})
    request = reproduce.request_from_receipt(
        make_receipt("cuda-0123abcd", recipe={"resolved_defines": defines}), known_recipes, COMMIT
    )
    assert (request.recipe, request.arch, request.source) == ("cuda", (("--sm", "86,89"),), None)
    assert "GGML_NATIVE=OFF" in request.defines
    assert request.toolchains == ()
    ref = {"id": "cuda-13.0", "name": "cuda", "version": "13.0", "packages": {}}
    with_toolchain = make_receipt("cuda-0123abcd", recipe={"resolved_defines": defines}, toolchains=[ref])
    assert reproduce.request_from_receipt(with_toolchain, known_recipes, COMMIT).toolchains == ("cuda-13.0",)
    with pytest.raises(UserError, match="this buildmgr pins 1234567"):
        reproduce.request_from_receipt(pinned, known_recipes, "1234567" + COMMIT[7:])
    local = make_receipt(source={"origin": "path:/home/me/llama.cpp"})
    with pytest.raises(UserError, match="verify needs the pinned source or a git URL"):
        reproduce.request_from_receipt(local, known_recipes, COMMIT)


def test_verify_on_a_host_whose_toolchain_differs_says_what_differs(tmp_env, tmp_path):
    archive = package_of(tmp_env, tmp_path, git_tree(tmp_path / "src", nondeterministic=False))
    other_cc = tmp_path / "bin" / "cc"
    other_cc.parent.mkdir()
    other_cc.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "othercc 99.1"; exit 0; }\nexec gcc "$@"\n')
    other_cc.chmod(0o755)
    result = buildmgr(tmp_env | {"CC": str(other_cc)}, "verify", str(archive))
    assert_user_error(result, "cannot rebuild", "cc is othercc 99.1 here")
    assert not (Path(tmp_env["XDG_CACHE_HOME"]) / "buildmgr" / "verify").exists()


def test_a_host_whose_glibc_cannot_be_read_is_told_the_floor_was_not_checked(tmp_path, monkeypatch):
    receipt = fake_build(tmp_path, glibc="2.34", glibc_file="bin/llama-cli").receipt
    monkeypatch.setattr(runtime, "host_glibc", lambda: None)
    findings = compat.host_findings(
        receipt, {"LD_LIBRARY_PATH": ""}, platform.machine(), Dirs(tmp_path / "d", tmp_path / "c", tmp_path / "f")
    )
    assert "warning: this host's glibc version is unknown (musl?); GLIBC_2.34 is not checked" in [
        f.line() for f in findings
    ]


def test_the_wrong_file_is_named_for_what_it_is_and_verify_refuses_to_verify(tmp_path):
    """Issue #35: a directory was 'no such artifact file', the .sha256 asked for a .sha256.sha256, and a tampered
    archive given to verify or publish was refused 'to install'."""
    from conftest import assert_user_error, buildmgr, make_env

    env = make_env(tmp_path / "home")
    archive = packaged(tmp_path)
    assert_user_error(buildmgr(env, "install-artifact", str(tmp_path)), "is a directory")
    assert_user_error(buildmgr(env, "verify", str(tmp_path)), "is a directory")
    assert_user_error(
        buildmgr(env, "install-artifact", f"{archive}.sha256"),
        "is the checksum file",
        f"name the archive, {archive.name}",
    )
    with open(archive, "r+b") as handle:  # one byte changed: the checksum no longer matches
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 1]))
    assert_user_error(buildmgr(env, "verify", str(archive)), "checksum mismatch", "refusing to verify it")
    assert_user_error(buildmgr(env, "install-artifact", str(archive)), "refusing to install it")
    assert_user_error(buildmgr(env, "publish", str(archive), "--to", str(tmp_path / "repo")), "refusing to publish it")
