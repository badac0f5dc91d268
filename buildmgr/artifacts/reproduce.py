"""verify: build an artifact again from its receipt, in scratch dirs and without any remote cache, and compare every
installed file."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildmgr import backends
from buildmgr.artifacts.unpack import Artifact
from buildmgr.building.options import BuildRequest
from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.store.receipt import Receipt

if TYPE_CHECKING:
    from buildmgr.building.plan import BuildPlan
    from buildmgr.core.progress import Reporter


def request_from_receipt(receipt: Receipt, known: dict[str, Any], pinned_commit: str) -> BuildRequest:
    """The `build` that made this receipt: recipe, arch flags, extra -D and source. UserError if it cannot be asked."""
    from buildmgr.building.recipes import BASE_DEFINES, compose

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
    options = backends.arch_options()
    arch = {option.flag: option.from_defines(resolved) for option in options}
    for option in options:
        resolved.pop(option.define, None)
    implied = dict(BASE_DEFINES) | dict(recipe.defines)
    extra = {
        key: value
        for key, value in resolved.items()
        if implied.get(key) != value and key not in ("LLAMA_BUILD_COMMIT", "LLAMA_BUILD_NUMBER")
    }
    return BuildRequest(
        recipe.name,
        arch=tuple((flag, value) for flag, value in arch.items() if value is not None),
        source=location,
        defines=tuple(f"{key}={value}" for key, value in sorted(extra.items())),
        toolchains=tuple(ref.id for ref in receipt.toolchains),
        fixes=receipt.fixes,
    )


def identity_differences(receipt: Receipt, plan: BuildPlan) -> list[str]:
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
    ccache: dict[str, Any] | None

    def to_json(self) -> dict[str, object]:
        return {"id": self.build_id, "files": self.files, "differ": list(self.differ), "ccache": self.ccache}


def verify(
    dirs: Dirs, artifact: Artifact, environ: Mapping[str, str], reporter: Reporter, *, cold: bool
) -> Verification:
    """Build again what the receipt says, in a scratch data and cache dir, without the remote compile cache (its
    entries could be the artifact's own), and compare every installed file. `cold` also leaves the local cache out."""
    import uuid

    from buildmgr.building import builder, kits
    from buildmgr.building.options import all_recipes, plan_build
    from buildmgr.building.source import sdist
    from buildmgr.core.config import Settings
    from buildmgr.tools import compile_cache

    receipt = artifact.receipt
    pin = sdist.load_pin()
    request = request_from_receipt(receipt, all_recipes(dirs, receipt.recipe.name, reporter.warn), pin.commit)
    scratch = dirs.cache / "verify" / f"{receipt.id}-{uuid.uuid4().hex[:8]}"
    work = Dirs(scratch / "data", scratch / "cache", dirs.config, scratch / "ccache" if cold else dirs.ccache)
    try:
        if request.source is None:  # the pinned tree this user already synced (and verified), read only
            synced = sdist.pinned_tree(pin, dirs)
            if sdist.is_synced(synced, pin):
                work.sources.mkdir(parents=True)
                os.symlink(synced.path, sdist.pinned_tree(pin, work).path)
        for ref in receipt.toolchains:  # this user's own, checked, read only (at their real path, as built)
            added = kits.find(dirs, ref.id)
            kits.require_intact(added)
            work.toolchains.mkdir(parents=True, exist_ok=True)
            os.symlink(added.root, work.toolchains / ref.id)
        isolated = compile_cache.without_remote(environ)
        plan = plan_build(request, work, isolated, lambda: Settings.load(work, isolated), reporter.warn)
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
