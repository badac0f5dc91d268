"""A llama.cpp source tree with a known identity (pinned sdist, local checkout or git)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr import proc
from buildmgr.config import Dirs, resource_path
from buildmgr.errors import BuildFailed, UserError
from buildmgr.extract import safe_extract
from buildmgr.fsutil import atomic_write_text, locked, sha256_file

if TYPE_CHECKING:
    pass

MARKER = ".buildmgr-source.json"
# Trees not needed to build; skipped when fingerprinting a local checkout.
_UNBUILT_DIRS = {".git", "models", "docs", "media", "gguf-py", "benches", "tests", "node_modules"}


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sha256: str
    subdir: str
    commit: str
    date: str
    llama_version: str
    ggml_version: str
    build_number: int

    @property
    def commit_time(self) -> int:
        """The commit's day at 00:00 UTC: the sdist carries the commit's date, not its time."""
        return int(datetime.fromisoformat(self.date).replace(tzinfo=UTC).timestamp())

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def sdist_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}.tar.gz"


def load_pin(path: Path | None = None) -> Pin:
    path = path or resource_path("vendor/llama.cpp.lock.toml")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))["source"]
        return Pin(**{name: table[name] for name in Pin.__dataclass_fields__})
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a valid source lock ({err})") from None


def version_label(llama_version: str, commit: str | None, fingerprint: str) -> str:
    """Directory name under builds/: llama.cpp's own version plus the commit (or the file stamps)."""
    return f"{llama_version}-{commit[:7] if commit else f'local-{fingerprint[:8]}'}"


def build_label(build_number: int, state: str, commit: str | None, fingerprint: str) -> str:
    """`b11312` like upstream's release tags, for a tree that is exactly a commit; else the file stamps."""
    exact = state in ("pinned", "clean") and commit
    if exact and build_number:
        return f"b{build_number}"
    return commit[:7] if exact and commit else f"local-{fingerprint[:8]}"


@dataclass(frozen=True)
class SourceTree:
    path: Path
    origin: str
    commit: str | None
    build_number: int
    llama_version: str
    fingerprint: str  # what makes two trees the same source, for the build hash
    # "pinned" (the verified sdist), "clean" or "dirty" (a git checkout), "vendored" (the sdist extracted
    # with --vendor: edits are not tracked) or "untracked" (no git, no marker): build_number 0 means unknown
    state: str = "pinned"
    commit_time: int | None = None  # seconds since the epoch; a package's file times
    changes: tuple[str, ...] = ()  # a dirty checkout's `git status` lines: how it differs from its commit

    @property
    def changes_sha256(self) -> str | None:
        """A digest of the changed and untracked paths with their status, so an attestation names this tree's
        difference from its commit without listing it."""
        if not self.changes:
            return None
        return hashlib.sha256("\0".join(self.changes).encode()).hexdigest()

    @property
    def short_commit(self) -> str:
        return self.commit[:7] if self.commit else "unknown"

    @property
    def version_label(self) -> str:
        return version_label(self.llama_version, self.commit, self.fingerprint)

    def cmake_defines(self) -> dict[str, str]:
        # Without these, build-info asks git in the source dir and prints "commit unknown",
        # or worse, the commit of an enclosing repository.
        return {"LLAMA_BUILD_COMMIT": self.short_commit, "LLAMA_BUILD_NUMBER": str(self.build_number)}

    def to_json(self) -> dict[str, object]:
        return {
            "origin": self.origin,
            "path": str(self.path),
            "commit": self.commit,
            "build_number": self.build_number,
            "llama_version": self.llama_version,
            "fingerprint": self.fingerprint,
            "state": self.state,
            "commit_time": self.commit_time,
            **({"changes": len(self.changes), "changes_sha256": self.changes_sha256} if self.changes else {}),
        }


# --- what --source means (pure) ---------------------------------------------------------


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # "pinned" | "path" | "git"
    location: str = ""
    ref: str = ""


def _is_dir(text: str) -> bool:
    try:
        return Path(text).is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte: not a directory anyone has
        return False


def parse_source_spec(text: str | None) -> SourceSpec:
    if not text:
        return SourceSpec("pinned")
    if _is_dir(text):
        return SourceSpec("path", text)
    if "@" in text:
        url, ref = text.rsplit("@", 1)
        if url.startswith("-") or ref.startswith("-"):
            raise UserError(f"--source {text!r}: a URL or ref that starts with '-' would be read by git as an option")
        if ref and ("://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url) or _is_dir(url)):
            return SourceSpec("git", url, ref)
    raise UserError(
        f"--source {text!r} is neither an existing directory nor a git URL@REF "
        "(e.g. https://github.com/ggml-org/llama.cpp@b6000)"
    )


# --- checking that a tree is llama.cpp (pure over the file system) -----------------------


def read_llama_version(root: Path) -> str:
    """The MAJOR.MINOR.PATCH of the tree's top CMakeLists.txt, or raise UserError."""
    cmakelists = root / "CMakeLists.txt"
    try:
        text = cmakelists.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    if not re.search(r'project\s*\(\s*"?llama\.cpp"?', text) or not (root / "ggml" / "CMakeLists.txt").is_file():
        raise UserError(
            f'{root} is not a llama.cpp source tree (no CMakeLists.txt with project("llama.cpp") '
            "and ggml/); pass the top directory of a llama.cpp checkout"
        )
    parts = [re.search(rf"set\(LLAMA_VERSION_{p}\s+(\d+)\)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    found = [m.group(1) for m in parts if m is not None]
    return ".".join(found) if len(found) == len(parts) else "0.0.0"


def fingerprint_tree(root: Path) -> str:
    """Cheap identity of a working tree: every built file's path, size and mtime."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _UNBUILT_DIRS and not d.startswith("build"))
        for name in sorted(filenames):
            full = Path(dirpath, name)
            stat = full.lstat()
            digest.update(f"{full.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


# --- the three kinds of source ----------------------------------------------------------


def _download_sdist(pin: Pin, dirs: Dirs) -> Path:
    """The user's own pip fetches the sdist, so their index settings apply. pip checks the lock's sha256 itself
    (hash-checking mode) before it prepares the sdist's metadata, so no code from an unverified sdist ever runs.
    That preparation uses this environment's scikit-build-core (a dependency of buildmgr) instead of installing one
    into a fresh build environment: 2.3 s less per fetch here, and no second trip to the index."""
    dirs.downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dirs.downloads, prefix=".pip-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{pin.requirement} --hash=sha256:{pin.sha256}\n", encoding="utf-8")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "--require-hashes",
            "--no-build-isolation",
            "-d",
            tmp,
            "-r",
            str(requirements),
        ]
        ran = proc.run(cmd)
        found = list(Path(tmp).glob("*.tar.gz"))
        if not ran.ok or len(found) != 1:
            output = ran.output
            tail = tuple(output.strip().splitlines()[-8:])
            if "DO NOT MATCH THE HASHES" in output:
                raise BuildFailed(
                    f"pip refused {pin.requirement}: its sha256 is not the lock's {pin.sha256[:8]}", tail=tail
                )
            raise BuildFailed(f"pip could not download {pin.requirement}", tail=tail)
        target = dirs.downloads / pin.sdist_name
        os.replace(found[0], target)
        return target


def verify_sdist(path: Path, pin: Pin) -> None:
    actual = sha256_file(path)
    if actual != pin.sha256:
        raise UserError(
            f"{path.name}: sha256 {actual} does not match the lock's {pin.sha256}; "
            "the index served a different file: check your pip index settings"
        )


def pinned_tree(pin: Pin, dirs: Dirs) -> SourceTree:
    return SourceTree(
        path=dirs.sources / f"llama.cpp-{pin.commit[:12]}",
        origin=f"pypi:{pin.requirement}",
        commit=pin.commit,
        build_number=pin.build_number,
        llama_version=pin.llama_version.split("-")[0],
        fingerprint=pin.commit,
        commit_time=pin.commit_time,
    )


def vendor_dir() -> Path:
    """`vendor/llama.cpp` beside the lock file of a buildmgr source checkout (git-ignored)."""
    lock = resource_path("vendor/llama.cpp.lock.toml")
    if "_data" in lock.parts:
        raise UserError("--vendor extracts into a buildmgr source checkout's vendor/; run it from a clone of buildmgr")
    return lock.parent / "llama.cpp"


def read_marker(root: Path) -> dict[str, Any]:
    try:
        marker = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def is_synced(tree: SourceTree, pin: Pin) -> bool:
    return read_marker(tree.path).get("sha256") == pin.sha256


def sync_pinned(pin: Pin, dirs: Dirs, archive: Path | None = None, target: Path | None = None) -> SourceTree:
    """Fetch (unless already there), verify, then extract the pinned tree (to `target`, e.g. vendor/llama.cpp, if
    given); idempotent."""
    tree = pinned_tree(pin, dirs)
    if target is not None:
        tree = dataclasses.replace(tree, path=target)
    if archive is not None:
        verify_sdist(archive, pin)  # a file the user hands in is checked every time, synced or not
    if is_synced(tree, pin):
        return tree
    if archive is None:
        archive = dirs.downloads / pin.sdist_name
        if archive.exists():
            try:
                verify_sdist(archive, pin)
            except UserError:
                archive.unlink()  # a corrupt cached download is fetched again
        if not archive.exists():
            with locked(dirs.downloads / ".lock"):  # gc leaves a download in progress alone
                archive = _download_sdist(pin, dirs)
            try:
                verify_sdist(archive, pin)
            except UserError:
                archive.unlink()
                raise
    with locked(dirs.sources / ".lock"):
        if is_synced(tree, pin):
            return tree
        tree.path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=tree.path.parent, prefix=".extract-"))
        try:
            safe_extract(archive, pin.subdir, staging / "tree")
            marker = {"sha256": pin.sha256, "commit": pin.commit, "build_number": pin.build_number, "date": pin.date}
            atomic_write_text(staging / "tree" / MARKER, json.dumps(marker))
            if tree.path.exists():
                shutil.rmtree(tree.path)
            os.replace(staging / "tree", tree.path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return tree


def _git(args: list[str], cwd: Path | None = None) -> str:
    git = shutil.which("git")
    if git is None:
        raise UserError("git is not installed; install it (apt-get install git) to build from a git URL")
    ran = proc.run([git, *args], cwd=cwd)
    if not ran.ok:
        last = (ran.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"git {' '.join(args[:2])} failed: {last}")
    return ran.stdout.strip()


@dataclass(frozen=True)
class GitFacts:
    commit: str
    count: int  # `git rev-list --count HEAD`: upstream's build number
    # the paths that differ from HEAD, changed or untracked (not ignored): ggml-cuda's CMake globs *.cu, so a new
    # file is built as surely as an edited one
    changes: tuple[str, ...]
    time: int

    @property
    def clean(self) -> bool:
        return not self.changes


def _git_facts(root: Path) -> GitFacts | None:
    """The facts of a git checkout; None when it is not one."""
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        commit = _git(["rev-parse", "HEAD"], cwd=root)
        count = int(_git(["rev-list", "--count", "HEAD"], cwd=root))
        status = _git(["status", "--porcelain=v1", "-z", "--untracked-files=all"], cwd=root)
        time = int(_git(["log", "-1", "--format=%ct", "HEAD"], cwd=root))
    except (UserError, ValueError):
        return None
    # -z: "XY path\0", a rename's source path as an entry of its own; sorted so the digest is the tree's
    changes = tuple(sorted(line for line in status.split("\0") if line))
    return GitFacts(commit, count, changes, time)


def local_tree(path: Path) -> SourceTree:
    root = path.resolve()
    version = read_llama_version(root)
    git = _git_facts(root)
    if git is not None:
        state = "clean" if git.clean else "dirty"
        fingerprint = git.commit if git.clean else fingerprint_tree(root)
        return SourceTree(
            root, f"path:{root}", git.commit, git.count, version, fingerprint, state, git.time, git.changes
        )
    marker = read_marker(root)  # `source sync --vendor` left it: the commit is known, edits are not
    if isinstance(marker.get("commit"), str) and isinstance(marker.get("build_number"), int):
        commit_time = int(datetime.fromisoformat(marker["date"]).replace(tzinfo=UTC).timestamp())
        fingerprint = fingerprint_tree(root)
        return SourceTree(
            root,
            f"path:{root}",
            marker["commit"],
            marker["build_number"],
            version,
            fingerprint,
            "vendored",
            commit_time,
        )
    return SourceTree(root, f"path:{root}", None, 0, version, fingerprint_tree(root), "untracked")


def _has_commit(clone: Path, ref: str) -> bool:
    if not re.fullmatch(r"[0-9a-f]{40}", ref):
        return False
    try:
        return _git(["cat-file", "-t", ref], cwd=clone) == "commit"
    except UserError:
        return False


def _resolve_ref(clone: Path, ref: str) -> str:
    for candidate in (f"origin/{ref}", ref):
        try:
            return _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}"], cwd=clone)
        except UserError:
            continue
    raise UserError(f"git checkout failed: {ref!r} is neither a branch, a tag nor a commit of that repository")


def git_tree(url: str, ref: str, dirs: Dirs) -> SourceTree:
    """One clone per URL, and one worktree per commit: builds of two refs at once never share files, and a
    worktree is never checked out again, so a build reads exactly the commit its receipt names."""
    key = hashlib.sha256(url.encode()).hexdigest()[:12]
    clone = dirs.git / key
    with locked(dirs.git / ".lock"):
        fresh = not (clone / ".git").exists()
        if fresh:
            tmp = dirs.git / f".{clone.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                _git(["clone", "--quiet", "--no-checkout", "--", url, str(tmp)])
            except UserError:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            os.replace(tmp, clone)
        elif not _has_commit(clone, ref):  # a full commit hash already here needs no fetch
            _git(["fetch", "--quiet", "--tags", "--force", "origin"], cwd=clone)
        try:
            commit = _resolve_ref(clone, ref)
        except UserError:
            if fresh:  # a bad ref leaves no clone behind
                shutil.rmtree(clone, ignore_errors=True)
            raise
        worktree = dirs.git / f"{key}-{commit[:12]}"
        if not (worktree / ".git").exists():
            shutil.rmtree(worktree, ignore_errors=True)
            _git(["worktree", "prune"], cwd=clone)
            _git(["worktree", "add", "--quiet", "--detach", "--force", str(worktree), commit], cwd=clone)
    version = read_llama_version(worktree)
    git = _git_facts(worktree)
    if git is None:
        raise UserError(f"git worktree {worktree} has no readable HEAD; run 'buildmgr gc' and try again")
    return SourceTree(worktree, f"git:{url}@{ref}", git.commit, git.count, version, git.commit, "clean", git.time)


def resolve_source(spec: SourceSpec, dirs: Dirs) -> SourceTree:
    if spec.kind == "path":
        return local_tree(Path(spec.location))
    if spec.kind == "git":
        return git_tree(spec.location, spec.ref, dirs)
    return sync_pinned(load_pin(), dirs)


def materialize(tree: SourceTree, dirs: Dirs) -> SourceTree:
    """Make sure the tree's files are on disk: only a pinned tree may still need fetching."""
    if tree.origin.startswith("pypi:"):
        return sync_pinned(load_pin(), dirs)
    return tree
