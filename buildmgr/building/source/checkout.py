"""A local directory: a git checkout (clean or dirty), a tree `source sync --vendor` extracted, or neither."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from buildmgr.building.source.git import git_facts
from buildmgr.building.source.tree import SourceTree, fingerprint_tree, read_llama_version, read_marker


def local_tree(path: Path) -> SourceTree:
    root = path.resolve()
    version = read_llama_version(root)
    git = git_facts(root)
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
