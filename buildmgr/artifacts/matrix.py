"""The CI matrix: one entry per recipe × arch variant × OS × CPU, with the runner and the artifact's name. Pure."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from buildmgr import backends
from buildmgr.artifacts.names import CPU_ARCH, SYSTEM, artifact_stem
from buildmgr.building import kit_sources
from buildmgr.building.recipes import Recipe
from buildmgr.building.source.tree import build_label
from buildmgr.core.errors import UserError
from buildmgr.tools.kit_spec import Kit


@dataclass(frozen=True)
class Runner:
    label: str
    container: str = ""


def runner_for(system: str, cpu_arch: str, recipe_backends: tuple[str, ...]) -> Runner | None:
    """The oldest image that has what the build needs: every year of glibc left out is a distro it runs on.

    ubuntu-22.04 (glibc 2.35) unless a backend needs a newer release or a container (its module says which).
    """
    if system == "macos":
        return Runner("macos-14" if cpu_arch == "arm64" else "macos-13")
    if system != "linux":
        return None
    suffix = "-arm" if cpu_arch == "arm64" else ""
    release, container = ci_runner(recipe_backends) or ("ubuntu-22.04", "")
    return Runner(f"{release}{suffix}", container)


@dataclass(frozen=True)
class MatrixRequest:
    recipes: tuple[str, ...]
    arch: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # option flag (--sm) → one value per variant
    systems: tuple[str, ...] = ("linux",)
    cpu_archs: tuple[str, ...] = ("x64",)
    toolchain: str = "system"  # pypi: CUDA from NVIDIA's wheels (`toolchain add`) on a stock runner, no container


def _arch_variants(recipe: Recipe, request: MatrixRequest) -> tuple[list[tuple[list[str], str]], str | None]:
    """([(build flags, arch label)], why none) for one recipe: one variant per value of each arch option."""
    variants: list[tuple[list[str], str]] = [([], "")]
    for option in backends.arch_options(recipe.backends):
        values = request.arch.get(option.flag, ())
        if not values:
            return [], option.ci_missing
        mine = [([option.flag, text], option.ci_label(text)) for text in values]
        variants = [
            (flags + more, "-".join(filter(None, (label, more_label))))
            for flags, label in variants
            for more, more_label in mine
        ]
    return variants, None


def matrix(
    request: MatrixRequest, known: dict[str, Recipe], build_number: int, commit: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(entries, left out with a reason). Unknown recipes and impossible archs raise UserError."""
    from buildmgr.building.recipes import compose

    for system in request.systems:
        if system not in SYSTEM.values():
            raise UserError(f"--os {system!r}: buildmgr builds for {', '.join(SYSTEM.values())}")
    for cpu_arch in request.cpu_archs:
        if cpu_arch not in set(CPU_ARCH.values()):
            raise UserError(f"--cpu-arch {cpu_arch!r}: one of {', '.join(sorted(set(CPU_ARCH.values())))}")
    label = build_label(build_number, "pinned", commit, commit)
    entries: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for expression in request.recipes:
        recipe = compose(expression, known)
        variants, why_none = _arch_variants(recipe, request)
        for system in request.systems:
            for cpu_arch in request.cpu_archs:
                where = {"recipe": recipe.name, "os": system, "cpu_arch": cpu_arch}
                setup = ci_setup(recipe.backends)
                loadable = dict(recipe.defines).get("GGML_BACKEND_DL") == "ON"
                reason = why_none or unbuildable_in_ci(recipe.backends, system, loadable)
                kits = (
                    kit_sources.pypi_kits(recipe.backends) if request.toolchain == "pypi" and system == "linux" else ()
                )
                runner = runner_for(system, cpu_arch, recipe.backends)
                if kits and runner is not None:  # the release the container would have had, without the container
                    runner = Runner(runner.label)
                    setup = tuple(s for s in setup if s not in {setup_of_kit(k) for k in kits})
                if reason is None and runner is None:
                    reason = f"no runner for {system}/{cpu_arch}"
                if reason is not None or runner is None:
                    skipped.append(where | {"reason": reason})
                    continue
                apt, apt_options = ci_apt(recipe.backends, setup)
                for flags, arch in variants:
                    args = ["build", recipe.name, *flags]
                    args += [word for kit in kits for word in ("--toolchain", kit.name)]
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
                            # what the provisioning step installs, as words for `apt-get` (the workflow's one step)
                            "apt": " ".join(apt),
                            "apt_options": " ".join(apt_options),
                            # what `buildmgr toolchain add` adds first (the workflow caches <data>/toolchains)
                            "toolchains": " ".join(kit_sources.kit_request(kit) for kit in kits),
                            "artifact": artifact_stem(label, system, recipe.name, arch, cpu_arch) + ".tar.gz",
                            "ccache_key": f"buildmgr-ccache-{cache_scope}-",
                            "native_cpu": dict(recipe.defines).get("GGML_NATIVE") == "ON",
                        }
                    )
    return entries, skipped


# --- what the workflow needs for a recipe's backends, from their records ---


def unbuildable_in_ci(names: tuple[str, ...], system: str, loadable: bool) -> str | None:
    """Why the artifacts workflow cannot build (and smoke-run) these backends on a GPU-less runner of this OS."""
    for name in names:
        known = backends.backend(name)
        if system not in known.systems:
            return f"{name} does not build on {system}"
        if known.ci is None:
            return f"the artifacts workflow has no step that installs {name}'s toolkit"
        if known.driver_library and not loadable:
            return (
                f"every tool of a non-DL {name} build loads {known.driver_library} at start, which a GPU-less runner "
                f"lacks, so its smoke run cannot pass; add universal (backends as loadable modules)"
            )
    return None


def ci_setup(names: tuple[str, ...]) -> tuple[str, ...]:
    """The workflow's provisioning steps these backends need, e.g. ('cuda', 'vulkan')."""
    return tuple(sorted({ci.setup for name in names if (ci := backends.backend(name).ci) is not None and ci.setup}))


def ci_apt(names: tuple[str, ...], setup: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(packages, apt-get update options) the workflow installs for these backends' provisioning steps in `setup`."""
    chosen = [ci for name in names if (ci := backends.backend(name).ci) is not None and ci.setup in setup]
    packages = tuple(dict.fromkeys(p for ci in chosen for p in ci.apt))
    options = tuple(o for ci in chosen if ci.apt for o in ci.apt_options)
    return packages, options


def setup_of_kit(kit: Kit) -> str:
    """The provisioning step a toolchain from `toolchain add` stands in for ("" none)."""
    ci = backends.backend(kit.backend).ci
    return ci.setup if ci is not None else ""


def ci_runner(names: tuple[str, ...]) -> tuple[str, str] | None:
    """The (ubuntu release, container) these backends need on a Linux runner: a container wins, then the newest
    release; None where any runner does."""
    needs = [ci.runner for name in names if (ci := backends.backend(name).ci) is not None]
    found = [n for n in needs if n is not None]
    return max(found, key=lambda n: (bool(n[1]), n[0]), default=None)
