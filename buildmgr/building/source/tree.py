"""A llama.cpp source tree with a known identity, what `--source` means, and the checks that a tree is llama.cpp
(pure over the file system)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildmgr.core.errors import UserError

MARKER = ".buildmgr-source.json"


# Trees not needed to build; skipped when fingerprinting a local checkout.
_UNBUILT_DIRS = {".git", "models", "docs", "media", "gguf-py", "benches", "tests", "node_modules"}


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


def read_marker(root: Path) -> dict[str, Any]:
    try:
        marker = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}
