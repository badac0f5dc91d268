"""What this host can build and with what, asked without building: each recipe's missing tools and failed checks
(`recipes`), every check of every backend with each added toolchain's beside it (`doctor`), and what a backend's
preflight still lacks with a toolchain just added. The CLI shows these; nothing here prints."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from buildmgr import backends
from buildmgr.building import kits, preflight
from buildmgr.building.options import all_recipes, backend_host
from buildmgr.building.recipes import Recipe
from buildmgr.core.config import Dirs, Settings
from buildmgr.core.findings import Check
from buildmgr.tools import toolchain


@dataclass(frozen=True)
class RecipeState:
    recipe: Recipe
    missing: tuple[str, ...]  # one line per missing tool or failed check; empty: buildable here
    toolchains: tuple[str, ...] = ()  # the added toolchains `build` would take for it by itself

    @property
    def buildable(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class ToolchainState:
    """An added toolchain: whether its files are as added, and its backend's checks with it."""

    added: kits.Added
    problem: str | None  # how it was changed after it was added
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[Check, ...]  # the build tools', then every backend's, with this host's own toolchains
    toolchains: tuple[ToolchainState, ...]
    compilers_missing: bool  # no C or C++ compiler: nothing builds


def recipes(
    dirs: Dirs, environ: Mapping[str, str], settings: Settings, warn: Callable[[str], None]
) -> list[RecipeState]:
    from buildmgr.building.options import pick_toolchains
    from buildmgr.core.errors import UserError
    from buildmgr.core.memo import Memo

    host = backend_host(environ, ccache=settings.ccache)
    memo = Memo.load(dirs.preflight_cache)
    states = []
    for recipe in all_recipes(dirs, warn=warn).values():
        report = preflight.inspect(recipe.backends, host, deep=False)
        picked: tuple[kits.Added, ...] = ()
        failures = [c.line() for c in report.failures]
        if report.failures:  # as `build` does: the one added toolchain of a backend this host lacks
            try:
                picked = pick_toolchains(dirs, report, memo)
            except UserError as err:
                failures.append(str(err))
            if picked:
                overlaid = dataclasses.replace(host, environ=kits.overlay(environ, picked))
                failures = [c.line() for c in preflight.inspect(recipe.backends, overlaid, deep=False).failures]
        missing = toolchain.problems(host.toolchain, recipe.tools, environ) + failures
        states.append(RecipeState(recipe, tuple(missing), tuple(a.id for a in picked)))
    return states


def doctor(dirs: Dirs, environ: Mapping[str, str], settings: Settings) -> DoctorReport:
    """Every check, with what took seconds remembered as `build` does (nvcc's compile probe, each added toolchain's
    hashes) while the files behind it stay."""
    from buildmgr.core.memo import Memo

    host = backend_host(environ, ccache=settings.ccache)
    memo = Memo.load(dirs.preflight_cache)
    report = preflight.inspect(backends.known_backends(), host, memo=memo)
    checks = toolchain.checks(host.toolchain) + list(report.checks)
    states = []
    for added in kits.scan(dirs)[0]:
        with_it: tuple[Check, ...] = ()
        if added.kit.builds:
            overlaid = dataclasses.replace(host, environ=kits.overlay(environ, (added,)))
            with_it = preflight.inspect((added.receipt.backend,), overlaid, memo=memo).checks
        states.append(ToolchainState(added, kits.changed(added, memo), with_it))
    with contextlib.suppress(OSError):  # a read-only cache: every answer is still right, just not remembered
        memo.save(dirs.preflight_cache)
    missing = bool(toolchain.problems(host.toolchain, ("cc", "c++"), environ))
    return DoctorReport(tuple(checks), tuple(states), missing)


def still_lacking(added: kits.Added, environ: Mapping[str, str], settings: Settings) -> list[str]:
    """What the backend's preflight still misses with this toolchain (glslc stays the host's own)."""
    if not added.kit.builds:
        return []
    host = backend_host(kits.overlay(environ, (added,)), ccache=settings.ccache)
    report = preflight.inspect((added.receipt.backend,), host, deep=False)
    return [check.line() for check in report.failures]
