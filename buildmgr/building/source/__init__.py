"""Where a build's llama.cpp comes from: the pinned sdist (`sdist`), a local checkout (`checkout`) or a git URL at a
ref (`git`), each a `tree.SourceTree` with a known identity."""

from __future__ import annotations

from pathlib import Path

from buildmgr.building.source.checkout import local_tree
from buildmgr.building.source.git import git_tree
from buildmgr.building.source.sdist import load_pin, sync_pinned
from buildmgr.building.source.tree import SourceSpec, SourceTree
from buildmgr.core.config import Dirs


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
