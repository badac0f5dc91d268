"""What this host can build and with what, asked without building: each recipe's missing tools and failed checks
(`recipes`), every check of every backend with each added toolchain's beside it (`doctor`), and what a backend's
preflight still lacks with a toolchain just added. The CLI shows these; nothing here prints."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from buildmgr import backends, kits, toolchain
from buildmgr.config import Dirs, Settings
from buildmgr.findings import Check
from buildmgr.options import all_recipes, backend_host
from buildmgr.recipes import Recipe


@dataclass(frozen=True)
class RecipeState:
    recipe: Recipe
    missing: tuple[str, ...]  # one line per missing tool or failed check; empty: buildable here

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
class Report:
    checks: tuple[Check, ...]  # the build tools', then every backend's, with this host's own toolchains
    toolchains: tuple[ToolchainState, ...]
    compilers_missing: bool  # no C or C++ compiler: nothing builds


def recipes(
    dirs: Dirs, environ: Mapping[str, str], settings: Settings, warn: Callable[[str], None]
) -> list[RecipeState]:
    host = backend_host(environ, ccache=settings.ccache)
    states = []
    for recipe in all_recipes(dirs, warn=warn).values():
        report = backends.inspect(recipe.backends, host, deep=False)
        missing = toolchain.problems(host.toolchain, recipe.tools, environ) + [c.line() for c in report.failures]
        states.append(RecipeState(recipe, tuple(missing)))
    return states


def doctor(dirs: Dirs, environ: Mapping[str, str], settings: Settings) -> Report:
    host = backend_host(environ, ccache=settings.ccache)
    checks = toolchain.checks(host.toolchain) + list(backends.inspect(backends.known_backends(), host).checks)
    states = []
    for added in kits.scan(dirs)[0]:
        with_it: tuple[Check, ...] = ()
        if added.kit.builds:
            overlaid = dataclasses.replace(host, environ=kits.overlay(environ, (added,)))
            with_it = backends.inspect((added.receipt.backend,), overlaid).checks
        states.append(ToolchainState(added, kits.changed(added), with_it))
    missing = bool(toolchain.problems(host.toolchain, ("cc", "c++"), environ))
    return Report(tuple(checks), tuple(states), missing)


def still_lacking(added: kits.Added, environ: Mapping[str, str], settings: Settings) -> list[str]:
    """What the backend's preflight still misses with this toolchain (glslc stays the host's own)."""
    if not added.kit.builds:
        return []
    host = backend_host(kits.overlay(environ, (added,)), ccache=settings.ccache)
    report = backends.inspect((added.receipt.backend,), host, deep=False)
    return [check.line() for check in report.failures]
