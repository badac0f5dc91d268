"""Stage 9: builds as release artifacts. A CI matrix, byte-identical packages with checksums, and an install on
another machine that checks the archive and the host before anything is extracted.

Naming follows upstream's `llama-<tag>-bin-<os>-<variant>-<cpu>.tar.gz`. A recipe's `+` becomes `-`
(`cuda+vulkan` → `cuda-vulkan`): release assets are served from object storage whose URL decoding turns a `+` in a
path into a space, and upstream never puts one in a name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from buildmgr import backends, store
from buildmgr.backends import cuda, hip
from buildmgr.config import Dirs
from buildmgr.errors import BuildFailed, UserError
from buildmgr.fsutil import atomic_write_text, fsync_file, sha256_file, umask_mode
from buildmgr.jsonshape import ShapeError
from buildmgr.options import BuildRequest
from buildmgr.receipt import SCHEMA as RECEIPT_SCHEMA
from buildmgr.receipt import InstalledFrom, Receipt
from buildmgr.recipes import Recipe
from buildmgr.source import build_label, unsafe_entry, version_label

if TYPE_CHECKING:
    from buildmgr.progress import Reporter

MANIFEST = "MANIFEST.sha256"
CPU_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
SYSTEM = {"Linux": "linux", "Darwin": "macos"}
_GZIP_LEVEL = 6  # what `tar -czf` uses: level 9 is slower for about 1 % less


def cpu_arch_of(machine: str) -> str:
    """`x86_64`/`amd64` → `x64`, `aarch64`/`arm64` → `arm64`; anything else as it is, lower case."""
    return CPU_ARCH.get(machine.lower(), machine.lower())


def artifact_stem(label: str, system: str, recipe: str, arch: str, cpu_arch: str) -> str:
    return "-".join(part for part in ("llama", label, "bin", system, recipe.replace("+", "-"), arch, cpu_arch) if part)


# --- the CI matrix (pure) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runner:
    label: str
    container: str = ""


# The workflow's CUDA toolkit: upstream's own release image at the pin. Its major decides the lowest --sm.
CUDA_IMAGE_VERSION = "13.4.1"
CUDA_CONTAINER = f"nvidia/cuda:{CUDA_IMAGE_VERSION}-devel-ubuntu24.04"


def runner_for(system: str, cpu_arch: str, setup: tuple[str, ...]) -> Runner | None:
    """The oldest image that has what the build needs: every year of glibc left out is a distro it runs on.

    ubuntu-22.04 (glibc 2.35) for CPU builds; ubuntu-24.04 where the distro's Vulkan headers (1.3.275) are the
    first new enough for ggml-vulkan; CUDA in NVIDIA's devel image, as upstream does.
    """
    if system == "macos":
        return Runner("macos-14" if cpu_arch == "arm64" else "macos-13")
    if system != "linux":
        return None
    suffix = "-arm" if cpu_arch == "arm64" else ""
    if "cuda" in setup:
        return Runner(f"ubuntu-24.04{suffix}", CUDA_CONTAINER)
    if "vulkan" in setup:
        return Runner(f"ubuntu-24.04{suffix}")
    return Runner(f"ubuntu-22.04{suffix}")


@dataclass(frozen=True)
class MatrixRequest:
    recipes: tuple[str, ...]
    sm: tuple[str, ...] = ()
    gfx: tuple[str, ...] = ()
    systems: tuple[str, ...] = ("linux",)
    cpu_archs: tuple[str, ...] = ("x64",)


def _arch_variants(recipe: Recipe, request: MatrixRequest) -> tuple[list[tuple[list[str], str]], str | None]:
    """([(build flags, arch label)], why none) for one recipe: one variant per --sm (and --gfx) value."""
    variants: list[tuple[list[str], str]] = [([], "")]
    if "CUDA" in recipe.backends:
        if not request.sm:
            return [], "it has CUDA: name the capabilities with --sm (a CI runner has no GPU to build natively for)"
        supported = cuda.archs_of_major(int(CUDA_IMAGE_VERSION.split(".")[0]))
        cuda_variants = []
        for text in request.sm:
            if text.strip() == "native":
                raise UserError("--sm native means this host's GPUs, and a CI runner has none; name them, e.g. --sm 86")
            _, label = cuda.parse_sm(text, supported, CUDA_IMAGE_VERSION)
            cuda_variants.append((["--sm", text], label))
        variants = [
            (flags + more, "-".join(filter(None, (lab, more_lab))))
            for flags, lab in variants
            for more, more_lab in cuda_variants
        ]
    if "ROCm" in recipe.backends:
        if not request.gfx:
            return [], "it has HIP: name the targets with --gfx"
        hip_variants = [(["--gfx", text], hip.parse_gfx(text)[1]) for text in request.gfx]
        variants = [
            (flags + more, "-".join(filter(None, (lab, more_lab))))
            for flags, lab in variants
            for more, more_lab in hip_variants
        ]
    return variants, None


def matrix(
    request: MatrixRequest, known: dict[str, Recipe], build_number: int, commit: str
) -> tuple[list[dict], list[dict]]:
    """(entries, left out with a reason). Unknown recipes and impossible archs raise UserError."""
    from buildmgr.recipes import compose

    for system in request.systems:
        if system not in SYSTEM.values():
            raise UserError(f"--os {system!r}: buildmgr builds for {', '.join(SYSTEM.values())}")
    for cpu_arch in request.cpu_archs:
        if cpu_arch not in set(CPU_ARCH.values()):
            raise UserError(f"--cpu-arch {cpu_arch!r}: one of {', '.join(sorted(set(CPU_ARCH.values())))}")
    label = build_label(build_number, "pinned", commit, commit)
    entries: list[dict] = []
    skipped: list[dict] = []
    for expression in request.recipes:
        recipe = compose(expression, known)
        variants, why_none = _arch_variants(recipe, request)
        for system in request.systems:
            for cpu_arch in request.cpu_archs:
                where = {"recipe": recipe.name, "os": system, "cpu_arch": cpu_arch}
                setup = backends.ci_setup(recipe.backends)
                loadable = dict(recipe.defines).get("GGML_BACKEND_DL") == "ON"
                reason = why_none or backends.unbuildable_in_ci(recipe.backends, system, loadable)
                runner = runner_for(system, cpu_arch, setup)
                if reason is None and runner is None:
                    reason = f"no runner for {system}/{cpu_arch}"
                if reason is not None or runner is None:
                    skipped.append(where | {"reason": reason})
                    continue
                for flags, arch in variants:
                    args = ["build", recipe.name, *flags]
                    cache_scope = "-".join(filter(None, (system, cpu_arch, recipe.name.replace("+", "-"), arch)))
                    entries.append(
                        where
                        | {
                            "name": " ".join(filter(None, (recipe.name, arch, system, cpu_arch))),
                            "args": args,
                            "build_args": shlex.join(args),
                            "arch": arch,
                            "runner": runner.label,
                            "container": runner.container,
                            "setup": ",".join(setup),
                            "artifact": artifact_stem(label, system, recipe.name, arch, cpu_arch) + ".tar.gz",
                            "ccache_key": f"buildmgr-ccache-{cache_scope}-",
                            "native_cpu": dict(recipe.defines).get("GGML_NATIVE") == "ON",
                        }
                    )
    return entries, skipped


# --- package ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Packaged:
    archive: Path
    checksum: Path
    sha256: str
    size: int


def receipt_stem(receipt: Receipt) -> str:
    source, host = receipt.source, receipt.host
    system = SYSTEM.get(host.system, host.system.lower())
    label = build_label(source.build_number, source.state or "pinned", source.commit, source.fingerprint)
    return artifact_stem(label, system, receipt.recipe.name, receipt.recipe.arch, cpu_arch_of(host.machine))


def source_date_epoch(environ: dict[str, str], receipt: Receipt) -> int:
    """SOURCE_DATE_EPOCH if set, else the source's commit time, else the build's finish (still one per build)."""
    text = environ.get("SOURCE_DATE_EPOCH")
    if text is not None:
        if not text.isdigit():
            raise UserError(f"SOURCE_DATE_EPOCH={text!r} must be a whole number of seconds since 1970")
        return int(text)
    if receipt.source.commit_time is not None:
        return receipt.source.commit_time
    from datetime import datetime

    return int(datetime.fromisoformat(receipt.finished).timestamp())


def _entries(prefix: Path) -> list[tuple[str, Path]]:
    return sorted((str(p.relative_to(prefix)), p) for p in prefix.rglob("*"))


def _tar_info(name: str, path: Path | None, epoch: int, size: int = 0) -> tarfile.TarInfo:
    """An entry that says nothing about where or when it was packed: owner 0, no names, fixed time, 644/755."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
    if path is None:
        info.type, info.mode, info.size = tarfile.REGTYPE, 0o644, size
    elif path.is_symlink():
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
    elif path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.type, info.size = tarfile.REGTYPE, path.stat().st_size
        info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
    return info


def package(build: store.Build, out_dir: Path, environ: dict[str, str]) -> Packaged:
    receipt = build.receipt
    if receipt.runtime is None:
        raise UserError(
            f"build {build.id} has no runtime needs in its receipt (built by an older buildmgr); "
            f"build it again with --rebuild, then package it"
        )
    changed = sorted(set(store.file_hashes(build.prefix).items()) ^ set(receipt.files.items()))
    if changed:
        names = sorted({name for name, _ in changed})
        raise BuildFailed(f"{build.prefix} no longer matches its receipt ({', '.join(names[:5])}); rebuild it")
    epoch = source_date_epoch(environ, receipt)
    stem = receipt_stem(receipt)
    entries = _entries(build.prefix)
    manifest = "".join(f"{sha256_file(p)}  {n}\n" for n, p in entries if p.is_file() and not p.is_symlink())
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{stem}.tar.gz"
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{stem}.", suffix=".tmp")
    os.fchmod(fd, umask_mode())
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=_GZIP_LEVEL) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            tar.addfile(_tar_info(stem, build.prefix, epoch))
            rows: list[tuple[str, Path | None]] = [*entries, (MANIFEST, None)]
            for name, path in sorted(rows, key=lambda row: row[0]):
                if path is None:
                    data = manifest.encode()
                    tar.addfile(_tar_info(f"{stem}/{name}", None, epoch, len(data)), io.BytesIO(data))
                elif path.is_file() and not path.is_symlink():
                    with open(path, "rb") as handle:
                        tar.addfile(_tar_info(f"{stem}/{name}", path, epoch), handle)
                else:
                    tar.addfile(_tar_info(f"{stem}/{name}", path, epoch))
        fsync_file(archive_tmp := Path(tmp))
        os.replace(archive_tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    digest = sha256_file(archive)
    checksum = out_dir / f"{archive.name}.sha256"
    atomic_write_text(checksum, f"{digest}  {archive.name}\n")
    return Packaged(archive, checksum, digest, archive.stat().st_size)


# --- reading an artifact: everything is checked before anything is extracted -------------------------------


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str
    top: str
    receipt: Receipt
    members: tuple[tarfile.TarInfo, ...]


def _bad(path: Path, why: str) -> UserError:
    return UserError(f"{path.name}: {why}; refusing to install it")


def _read_checksum(path: Path) -> str:
    checksum = path.with_name(path.name + ".sha256")
    try:
        fields = checksum.read_text(encoding="utf-8").split()
    except OSError:
        raise UserError(
            f"{path.name}: no {checksum.name} beside it; an artifact comes with its checksum file"
        ) from None
    if len(fields) < 2 or not re.fullmatch(r"[0-9a-f]{64}", fields[0]) or fields[1].lstrip("*") != path.name:
        raise _bad(path, f"{checksum.name} is not a sha256sum line for it")
    return fields[0]


def _valid_receipt(path: Path, data: bytes) -> Receipt:
    try:
        receipt = Receipt.from_text(data)
    except ShapeError as err:
        raise _bad(path, f"its {store.RECEIPT} is not a buildmgr receipt of schema {RECEIPT_SCHEMA} ({err})") from None
    if receipt.runtime is None:
        raise _bad(path, f"its {store.RECEIPT} has no runtime needs (an artifact of an older buildmgr)")
    return receipt


def open_artifact(path: Path) -> Artifact:
    """Check the .sha256, every entry's path, the manifest and the receipt; raise UserError on any doubt."""
    if not path.is_file():
        raise UserError(f"{path}: no such artifact file")
    expected = _read_checksum(path)
    actual = sha256_file(path)
    if actual != expected:
        raise _bad(path, f"checksum mismatch (sha256 {actual[:12]}…, its .sha256 says {expected[:12]}…)")
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = tar.getmembers()
            tops = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
            for member in members:
                reason = unsafe_entry(member, PurePosixPath(next(iter(tops), "")))
                if reason:
                    raise _bad(path, f"unsafe entry {member.name!r} ({reason})")
            if len(tops) != 1:
                raise _bad(path, f"expected one top-level folder, found {len(tops)}")
            top = tops.pop()
            hashes: dict[str, str] = {}
            links: dict[str, str] = {}
            texts: dict[str, bytes] = {}
            for member in members:
                relative = str(PurePosixPath(member.name).relative_to(top)) if member.name != top else ""
                if member.isfile():
                    handle = tar.extractfile(member)
                    assert handle is not None
                    if relative in (MANIFEST, store.RECEIPT):
                        texts[relative] = handle.read()
                        hashes[relative] = hashlib.sha256(texts[relative]).hexdigest()
                    else:
                        hashes[relative] = hashlib.file_digest(handle, "sha256").hexdigest()
                elif member.issym():
                    links[relative] = member.linkname
                elif not member.isdir():
                    raise _bad(path, f"entry {member.name!r} is neither a file, a folder nor a link")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise _bad(path, f"not a readable .tar.gz ({err})") from None
    if store.RECEIPT not in texts:
        raise _bad(path, f"no {store.RECEIPT} in it (not a buildmgr artifact)")
    if MANIFEST not in texts:
        raise _bad(path, f"no {MANIFEST} in it (not a buildmgr artifact)")
    listed = dict(reversed(line.split("  ", 1)) for line in texts[MANIFEST].decode("utf-8", "replace").splitlines())
    files = {name: digest for name, digest in hashes.items() if name != MANIFEST}
    if listed != files:
        differ = sorted(set(listed.items()) ^ set(files.items()))
        raise _bad(path, f"its files do not match its {MANIFEST} ({', '.join(sorted({n for n, _ in differ})[:5])})")
    receipt = _valid_receipt(path, texts[store.RECEIPT])
    contents = {name: digest for name, digest in files.items() if name != store.RECEIPT}
    contents |= {name: f"link:{target}" for name, target in links.items()}
    if contents != receipt.files:
        differ = sorted(set(contents.items()) ^ set(receipt.files.items()))
        raise _bad(path, f"its files do not match its receipt ({', '.join(sorted({n for n, _ in differ})[:5])})")
    return Artifact(path, actual, top, receipt, tuple(members))


def prefix_for(builds_dir: Path, receipt: Receipt) -> Path:
    source = receipt.source
    return builds_dir / version_label(source.llama_version, source.commit, source.fingerprint) / receipt.id


def extract(artifact: Artifact, staging: Path) -> None:
    """The archive's files, without its top folder and manifest, into an empty staging dir."""
    wanted = []
    for member in artifact.members:
        if member.name == artifact.top:
            continue
        relative = str(PurePosixPath(member.name).relative_to(artifact.top))
        if relative == MANIFEST:
            continue
        copy = member.replace(name=relative, deep=False)
        wanted.append(copy)
    with tarfile.open(artifact.path, "r:gz") as tar:
        tar.extractall(staging, members=wanted, filter="data")


# --- can this host run it? -----------------------------------------------------------------------------------

_DL_MODULE = re.compile(r"(^|/)libggml-(?!base|cpu)[a-z0-9]+\.so$")


def _only_loadable_modules(receipt: Receipt, users: tuple[str, ...]) -> bool:
    """True when every file that needs a library is a backend module a DL build loads only if it can."""
    dl = receipt.recipe.define("GGML_BACKEND_DL") == "ON"
    return dl and all(_DL_MODULE.search(user) for user in users)


def host_findings(receipt: Receipt, environ: dict[str, str], machine: str) -> list[tuple[str, str]]:
    """(severity, line) for everything that would stop the build from running here; errors block the install."""
    from packaging.version import Version

    from buildmgr import runtime

    needs = receipt.runtime
    assert needs is not None, "an artifact's receipt has its runtime needs (checked when it was opened)"
    findings: list[tuple[str, str]] = []
    built_on = receipt.host.machine.lower()
    if cpu_arch_of(built_on) != cpu_arch_of(machine):
        findings.append(("error", f"built for {built_on}, and this host is {machine}"))
        return findings
    glibc = runtime.host_glibc()
    if needs.glibc and glibc is None:
        findings.append(
            ("warning", f"this host's glibc version is unknown (musl?); GLIBC_{needs.glibc} is not checked")
        )
    if needs.glibc and glibc is not None and glibc < Version(needs.glibc):
        findings.append(
            (
                "error",
                (
                    f"this host's glibc is {glibc}, and {needs.glibc_file} needs GLIBC_{needs.glibc}: "
                    "use an artifact built on an older distro (the matrix builds CPU artifacts on ubuntu-22.04)"
                ),
            )
        )
    libraries = runtime.host_libraries(environ, machine)
    for library, users in needs.needed.items():
        if libraries.find(library) is not None:
            continue
        more = f" and {len(users) - 1} more" if len(users) > 1 else ""
        severity = "warning" if _only_loadable_modules(receipt, users) else "error"
        effect = "that backend will not load" if severity == "warning" else "nothing runs without it"
        findings.append(
            (
                severity,
                (
                    f"{library} is not found on this host (needed by {users[0]}{more}; {effect}): "
                    f"it comes from {backends.library_source(library)}"
                ),
            )
        )
    libstdcxx = libraries.find("libstdc++.so.6")
    if needs.libstdcxx and libstdcxx is not None:
        have = runtime.highest(runtime.provided_versions(libstdcxx), "GLIBCXX_")
        if have is not None and have < Version(needs.libstdcxx):
            findings.append(
                (
                    "error",
                    (
                        f"this host's libstdc++ provides GLIBCXX_{have}, and {needs.libstdcxx_file} needs "
                        f"GLIBCXX_{needs.libstdcxx}: install a newer libstdc++6, or use an artifact built on an older distro"
                    ),
                )
            )
    if needs.cuda_sass or needs.cuda_ptx:
        findings += cuda.kernel_findings(needs.cuda_sass, needs.cuda_ptx, cuda.visible_capabilities(environ))
    if needs.hip_targets:
        findings += hip.kernel_findings(needs.hip_targets, hip.visible_targets(environ))
    if receipt.recipe.define("GGML_NATIVE") == "ON":
        findings.append(
            (
                "warning",
                (
                    "built with GGML_NATIVE=ON: it may use CPU instructions this CPU lacks (the smoke run will tell); "
                    "the universal recipe builds every CPU variant"
                ),
            )
        )
    return findings


# --- install-artifact ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    build: store.Build
    already: bool
    warnings: tuple[str, ...]


def install(
    dirs: Dirs, artifact: Artifact, findings: list[tuple[str, str]], reporter: Reporter, environ: dict[str, str]
) -> Installed:
    """Extract into staging, check the files against the receipt again, smoke-run here, publish atomically."""
    from datetime import UTC, datetime

    from buildmgr.builder import prove_runs
    from buildmgr.fsutil import locked

    receipt = artifact.receipt
    build_id = receipt.id
    prefix = prefix_for(dirs.builds, receipt)
    warnings = tuple(line for severity, line in findings if severity == "warning")
    with locked(store.build_lock(dirs, build_id)):
        existing = store.load_receipt(prefix)
        if isinstance(existing, store.Unreadable):
            reporter.warn(f"{existing}; installing the artifact replaces it")
        elif existing is not None and existing.files == receipt.files:
            return Installed(store.Build(build_id, prefix, existing), True, warnings)
        store.drop_stale_staging(dirs, build_id)
        log = store.run_log(dirs, f"install-{build_id}")
        with store.staged(dirs, build_id) as staging:
            with reporter.phase("extract"):
                extract(artifact, staging)
                if store.file_hashes(staging) != receipt.files:  # the file changed since it was checked
                    raise UserError(f"{artifact.path.name}: changed while it was being installed; try again")
            with reporter.phase("smoke"):
                result = prove_runs(staging, receipt.source.short_commit, dirs, log, reporter, environ)
            installed = dataclasses.replace(
                receipt,
                installed_from=InstalledFrom(
                    artifact.path.name,
                    artifact.sha256,
                    datetime.now(UTC).isoformat(timespec="seconds"),
                    result,
                    warnings,
                    str(log),
                ),
            )
            store.publish(staging, prefix, installed)
    return Installed(store.Build(build_id, prefix, installed), False, warnings)


# --- verify: rebuild from the receipt and compare ---------------------------------------------------------------


def request_from_receipt(receipt: Receipt, known: dict, pinned_commit: str) -> BuildRequest:
    """The `build` that made this receipt: recipe, arch flags, extra -D and source. UserError if it cannot be asked."""
    from buildmgr.recipes import BASE_DEFINES, compose

    source = receipt.source
    origin = source.origin
    if origin.startswith("pypi:"):
        if source.commit != pinned_commit:
            raise UserError(
                f"built from llama.cpp {source.short_commit}, and this buildmgr pins {pinned_commit[:7]}: "
                f"verify with buildmgr {receipt.buildmgr}, which made it"
            )
        location = None
    elif origin.startswith("git:") and source.commit:
        location = f"{origin.removeprefix('git:').rsplit('@', 1)[0]}@{source.commit}"
    else:
        raise UserError(f"built from {origin or 'an unknown source'}: verify needs the pinned source or a git URL")
    recipe = compose(receipt.recipe.name, known)
    resolved = dict(receipt.recipe.resolved_defines)
    cuda_archs = resolved.pop("CMAKE_CUDA_ARCHITECTURES", None)
    hip_targets = resolved.pop("GPU_TARGETS", None)
    implied = dict(BASE_DEFINES) | dict(recipe.defines)
    extra = {
        key: value
        for key, value in resolved.items()
        if implied.get(key) != value and key not in ("LLAMA_BUILD_COMMIT", "LLAMA_BUILD_NUMBER")
    }
    return BuildRequest(
        recipe.name,
        sm=",".join(a.removesuffix("-real") for a in cuda_archs.split(";")) if cuda_archs else None,
        gfx=",".join(hip_targets.split(";")) if hip_targets else None,
        source=location,
        defines=tuple(f"{key}={value}" for key, value in sorted(extra.items())),
    )


def identity_differences(receipt: Receipt, plan) -> list[str]:
    """Why a rebuild here would not be the build in the receipt: tool versions, backend versions, defines."""
    found = []
    for name, tool in plan.toolchain.tools().items():
        theirs = receipt.toolchain.get(name, {}).get("version")
        if name != "ccache" and theirs != tool.version:
            found.append(f"{name} is {tool.version or 'missing'} here, {theirs or 'missing'} in the receipt")
    for name, version in sorted(set(plan.backend_versions.items()) ^ set(receipt.backend_versions.items())):
        found.append(f"{name} {version} differs")
    if dict(plan.defines) != receipt.recipe.resolved_defines:
        found.append("the resolved CMake defines differ")
    return found or ["the source or the targets differ"]


@dataclass(frozen=True)
class Verification:
    build_id: str
    files: int
    differ: tuple[str, ...]
    ccache: dict | None


def verify(dirs: Dirs, artifact: Artifact, environ: dict[str, str], reporter: Reporter, cold: bool) -> Verification:
    """Build again what the receipt says, in a scratch data and cache dir, without the remote compile cache (its
    entries could be the artifact's own), and compare every installed file. `cold` also leaves the local cache out."""
    import uuid

    from buildmgr import builder, compile_cache, source
    from buildmgr.options import all_recipes, resolve

    receipt = artifact.receipt
    pin = source.load_pin()
    request = request_from_receipt(receipt, all_recipes(dirs, receipt.recipe.name, reporter.warn), pin.commit)
    scratch = dirs.cache / "verify" / f"{receipt.id}-{uuid.uuid4().hex[:8]}"
    work = Dirs(scratch / "data", scratch / "cache", dirs.config, scratch / "ccache" if cold else dirs.ccache)
    try:
        if request.source is None:  # the pinned tree this user already synced (and verified), read only
            synced = source.pinned_tree(pin, dirs)
            if source.is_synced(synced, pin):
                work.sources.mkdir(parents=True)
                os.symlink(synced.path, source.pinned_tree(pin, work).path)
        isolated = compile_cache.without_remote(environ)
        plan = resolve(request, work, isolated, reporter.warn)
        if plan.build_id != receipt.id:
            raise UserError(
                f"this host cannot rebuild {receipt.id} identically (it would be {plan.build_id}): "
                + "; ".join(identity_differences(receipt, plan))
            )
        where = "without any compile cache" if cold else f"with the local compile cache only ({dirs.ccache})"
        reporter.say(f"rebuilding {receipt.id} from its receipt, {where}")
        rebuilt = builder.execute(dataclasses.replace(plan, remote_cache=None), work, reporter, isolated)
        theirs, ours = receipt.files, rebuilt.receipt.files
        differ = tuple(sorted(name for name in set(theirs) | set(ours) if theirs.get(name) != ours.get(name)))
        return Verification(receipt.id, len(theirs), differ, rebuilt.receipt.ccache)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(OSError):  # another verify may be using it
            scratch.parent.rmdir()
