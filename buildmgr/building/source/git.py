"""A git URL at a ref: one clone per URL and one worktree per commit; the facts of any git checkout."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from buildmgr.building.source.tree import SourceTree, read_llama_version
from buildmgr.core import proc
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import locked


def run_git(args: list[str], cwd: Path | None = None) -> str:
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


def git_facts(root: Path) -> GitFacts | None:
    """The facts of a git checkout; None when it is not one."""
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        commit = run_git(["rev-parse", "HEAD"], cwd=root)
        count = int(run_git(["rev-list", "--count", "HEAD"], cwd=root))
        status = run_git(["status", "--porcelain=v1", "-z", "--untracked-files=all"], cwd=root)
        time = int(run_git(["log", "-1", "--format=%ct", "HEAD"], cwd=root))
    except (UserError, ValueError):
        return None
    # -z: "XY path\0", a rename's source path as an entry of its own; sorted so the digest is the tree's
    changes = tuple(sorted(line for line in status.split("\0") if line))
    return GitFacts(commit, count, changes, time)


def _has_commit(clone: Path, ref: str) -> bool:
    if not re.fullmatch(r"[0-9a-f]{40}", ref):
        return False
    try:
        return run_git(["cat-file", "-t", ref], cwd=clone) == "commit"
    except UserError:
        return False


def _resolve_ref(clone: Path, ref: str) -> str:
    for candidate in (f"origin/{ref}", ref):
        try:
            return run_git(
                ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{candidate}^{{commit}}"], cwd=clone
            )
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
                run_git(["clone", "--quiet", "--no-checkout", "--", url, str(tmp)])
            except UserError:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            os.replace(tmp, clone)
        elif not _has_commit(clone, ref):  # a full commit hash already here needs no fetch
            run_git(["fetch", "--quiet", "--tags", "--force", "origin"], cwd=clone)
        try:
            commit = _resolve_ref(clone, ref)
        except UserError:
            if fresh:  # a bad ref leaves no clone behind
                shutil.rmtree(clone, ignore_errors=True)
            raise
        worktree = dirs.git / f"{key}-{commit[:12]}"
        if not (worktree / ".git").exists():
            shutil.rmtree(worktree, ignore_errors=True)
            run_git(["worktree", "prune"], cwd=clone)
            run_git(["worktree", "add", "--quiet", "--detach", "--force", str(worktree), commit], cwd=clone)
    version = read_llama_version(worktree)
    git = git_facts(worktree)
    if git is None:
        raise UserError(f"git worktree {worktree} has no readable HEAD; run 'buildmgr gc' and try again")
    return SourceTree(worktree, f"git:{url}@{ref}", git.commit, git.count, version, git.commit, "clean", git.time)
