"""Everything `buildmgr build` was asked, resolved once into a BuildPlan (cf. cibuildwheel's options.py).

Order matters for "nothing is written on bad input": pure checks first, host preflight next,
and only then anything that creates directories (the writable check, a git clone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from buildmgr import backends
from buildmgr.building import kits, preflight, source
from buildmgr.building.plan import RPATH_KEYS, Arch, BuildPlan, make_plan, parse_jobs
from buildmgr.building.recipes import Recipe, compose, load_recipes, parse_defines, with_defines
from buildmgr.building.source import sdist
from buildmgr.building.source.tree import SourceSpec, SourceTree, parse_source_spec
from buildmgr.core import hostfacts
from buildmgr.core.config import Dirs, Settings, ensure_writable, resource_path
from buildmgr.core.errors import UserError
from buildmgr.core.memo import Memo
from buildmgr.proof import host_faults
from buildmgr.store.receipt import FixRecord
from buildmgr.tools import toolchain


@dataclass(frozen=True)
class BuildRequest:
    recipe: str = "cpu"
    arch: tuple[tuple[str, str], ...] = ()  # (arch option flag, value) as given: (("--sm", "86"),)
    source: str | None = None
    jobs: str | None = None
    defines: tuple[str, ...] = ()
    toolchains: tuple[str, ...] = ()  # added toolchains by id or name (--toolchain)
    fixes: tuple[FixRecord, ...] = ()  # known faults to leave out whatever this host remembers (a receipt's, by verify)


def all_recipes(dirs: Dirs, wanted: str = "", warn: Callable[[str], None] = lambda message: None) -> dict[str, Recipe]:
    """Shipped and user recipes. A broken one fails only a command that asks for it; others get one warning."""
    broken: dict[str, UserError] = {}
    recipes = load_recipes(resource_path("recipes"), dirs.user_recipes, broken=broken)
    for name, error in broken.items():
        if name in wanted.split("+"):
            raise error
        warn(f"skipping a broken recipe: {error}")
    return recipes


def backend_host(
    environ: Mapping[str, str], toolchain_cache: Path | None = None, ccache: str = "bundled"
) -> backends.Host:
    """What the backends' checks look at: this host's facts, the environment and the toolchain."""
    facts = hostfacts.read()
    return backends.Host(
        dict(environ),
        facts.system,
        facts.machine,
        toolchain.detect(environ, toolchain_cache, ccache),
    )


def build_jobs(request: BuildRequest, names: tuple[str, ...], warn: Callable[[str], None]) -> int:
    """--jobs, else a job per core as far as the memory free now allows each its backends' budget; where the host does
    not say what is free, a job per core, said."""
    free = hostfacts.available_mib()
    cores = hostfacts.read().cpus or 1
    if free is None and request.jobs is None:
        warn(
            f"this host does not say how much memory is free (no MemAvailable in /proc/meminfo): {cores} compile "
            "jobs, one per core; --jobs N sets fewer"
        )
    return parse_jobs(request.jobs, cores, None if free is None else free / 1024, backends.gib_per_job(names))


def check_arch_flags(recipe: Recipe, request: BuildRequest) -> None:
    """An architecture option only for a recipe with the backend it belongs to."""
    taken = {option.flag for option in backends.arch_options(recipe.backends)}
    given = {flag for flag, _ in request.arch}
    for option in backends.arch_options():
        if option.flag in given - taken:
            raise UserError(
                f"{option.flag} applies to recipes with {option.language}, and {recipe.name} has none; "
                f"e.g. {option.example}"
            )


def resolve_arch(recipe: Recipe, request: BuildRequest, host: backends.Host, memo: Memo) -> Arch:
    """Each architecture option of the recipe's backends → its define, and the labels joined for the build id."""
    values = dict(request.arch)
    resolved = [
        (option, option.resolve(values.get(option.flag), host, memo))
        for option in backends.arch_options(recipe.backends)
    ]
    return Arch(
        tuple((option.define, value) for option, (value, _) in resolved), "-".join(label for _, (_, label) in resolved)
    )


# -D keys buildmgr sets itself: a user value would be overridden, so it is refused instead.
OWNED_DEFINES = {
    **backends.owned_defines(),
    "LLAMA_BUILD_COMMIT": "it comes from the source",
    "LLAMA_BUILD_NUMBER": "it comes from the source",
    "GGML_CCACHE": "buildmgr runs ccache itself",
    "CMAKE_MAKE_PROGRAM": "buildmgr builds with its own ninja",
    "CMAKE_C_FLAGS_INIT": "buildmgr maps source paths for reproducible binaries; pass CFLAGS in the environment",
    "CMAKE_CXX_FLAGS_INIT": "buildmgr maps source paths for reproducible binaries; pass CXXFLAGS in the environment",
    "CMAKE_UNITY_BUILD_RELOCATABLE": "buildmgr sets it for reproducible binaries",
    **{f"CMAKE_{lang}_COMPILER_LAUNCHER": "buildmgr runs ccache itself" for lang in backends.languages()},
    **dict.fromkeys(RPATH_KEYS, "buildmgr sets the $ORIGIN RPATH the prefix relies on"),
}


def refuse_owned(defines: dict[str, str]) -> None:
    for key in defines:
        if key in OWNED_DEFINES:
            raise UserError(f"-D {key} is set by buildmgr ({OWNED_DEFINES[key]}); leave it out")


@dataclass(frozen=True)
class Resolved:
    """A build request checked against this host with nothing written yet: the recipe, what the host's preflight
    found and the arch it resolved, the toolchains chosen, and where the source is."""

    recipe: Recipe
    source: SourceSpec
    local: SourceTree | None  # a local checkout, already read
    host: backends.Host
    jobs: int
    arch: Arch
    report: backends.Report
    chosen: tuple[kits.Added, ...]
    settings: Settings
    memo: Memo  # what the preflight learnt, saved by `prepare`
    fixes: tuple[FixRecord, ...] = ()  # known faults seen here, left out of this build


def resolve(
    request: BuildRequest,
    dirs: Dirs,
    environ: Mapping[str, str],
    settings: Callable[[], Settings],
    warn: Callable[[str], None] = lambda m: None,
) -> Resolved:
    """Everything checked before anything is written: bad input is one line and leaves no file behind. The settings
    are asked for after the command line's own mistakes are found (a broken config.toml does not hide them)."""
    extra = parse_defines(request.defines)
    refuse_owned(extra)
    recipe = with_defines(compose(request.recipe, all_recipes(dirs, request.recipe, warn)), extra)
    check_arch_flags(recipe, request)
    spec = parse_source_spec(request.source)
    loaded = settings()
    host = backend_host(environ, dirs.toolchain_cache, loaded.ccache)
    # ggml-cpu is in every build, whatever the recipe lists: its refusals always apply
    backends.check_defines(tuple(dict.fromkeys(("CPU", *recipe.backends))), dict(recipe.defines), host.machine)
    jobs = build_jobs(request, recipe.backends, warn)
    toolchain.require(host.toolchain, recipe.tools, recipe.name, environ)
    memo = Memo.load(dirs.preflight_cache)
    chosen = kits.chosen_for_build(dirs, request.toolchains, memo)
    for added in chosen:
        if added.receipt.backend not in recipe.backends:
            raise UserError(
                f"--toolchain {added.id} is for {added.receipt.backend}, and {recipe.name} has no such backend"
            )
    if chosen:
        host = dataclasses.replace(host, environ=kits.overlay(environ, chosen))
    report = preflight.inspect(recipe.backends, host, memo=memo)
    if report.failures and not request.toolchains:
        picked = pick_toolchains(dirs, report, memo)
        if picked:
            chosen = picked
            host = dataclasses.replace(host, environ=kits.overlay(environ, chosen))
            report = preflight.inspect(recipe.backends, host, memo=memo)
            for added in chosen:
                warn(f"using toolchain {added.id} (buildmgr toolchain add): this host's own {added.receipt.backend} "
                     "toolchain is incomplete ('buildmgr doctor' says what it lacks)")  # fmt: skip
    if report.failures:
        raise UserError(
            f"cannot build {recipe.name} here: "
            + "; ".join(c.line() for c in report.failures)
            + " ('buildmgr doctor' shows every check)"
        )
    arch = resolve_arch(recipe, request, host, memo)
    recipe, fixes = leave_out_faults(recipe, extra, host.toolchain, dirs, warn, request.fixes)
    local = source.resolve_source(spec, dirs) if spec.kind == "path" else None  # read only: checked before any write
    return Resolved(recipe, spec, local, host, jobs, arch, report, chosen, loaded, memo, fixes)


def leave_out_faults(
    recipe: Recipe,
    given: dict[str, str],
    tools: toolchain.Toolchain,
    dirs: Dirs,
    warn: Callable[[str], None],
    carried: tuple[FixRecord, ...] = (),
) -> tuple[Recipe, tuple[FixRecord, ...]]:
    """The recipe with the fixes of the runtime faults a proof saw here with this compiler (the user's own -D wins,
    with a warning), and those `carried` by the request."""
    applied: list[FixRecord] = []
    seen = host_faults.read(dirs, warn)
    if seen:
        compiler, cpu = host_faults.here(tools)
        applied, overruled = host_faults.fixes(
            seen, dict(recipe.defines), given, compiler, cpu, hostfacts.read().cpu_flags
        )
        for note in overruled:
            warn(note)
    fixes = (*carried, *(fix for fix in applied if fix.fault not in {c.fault for c in carried}))
    for fix in fixes:
        recipe = with_defines(recipe, fix.defines)
    return recipe, fixes


def prepare(resolved: Resolved, dirs: Dirs) -> BuildPlan:
    """The first writes: the data and cache dirs, the source fetched (pinned sdist, git clone), what the preflight
    learnt remembered; then the plan, whose hash is the build id."""
    hint = "set XDG_DATA_HOME / XDG_CACHE_HOME to a writable directory"
    ensure_writable(dirs.data, hint)
    ensure_writable(dirs.cache, hint)
    if dirs.shaders is not None and any(c.define in resolved.report.host_defines for c in backends.shader_caches()):
        ensure_writable(dirs.shaders, "set BUILDMGR_SHADER_CACHE to a writable directory, or unset it")
    spec = resolved.source
    if resolved.local is not None:
        tree = resolved.local
    elif spec.kind == "pinned":
        tree = sdist.pinned_tree(sdist.load_pin(), dirs)
    else:
        tree = source.resolve_source(spec, dirs)
    toolchain.remember(resolved.host.toolchain, dirs.toolchain_cache)
    resolved.memo.save(dirs.preflight_cache)
    chosen = resolved.chosen
    plan = make_plan(
        resolved.recipe,
        tree,
        resolved.host.toolchain,
        resolved.jobs,
        arch=resolved.arch,
        backend_versions=resolved.report.versions,
        host_defines=resolved.report.host_defines,
        toolchains=tuple(added.receipt.ref() for added in chosen),
        left_out=tuple(target for fix in resolved.fixes for target in fix.left_out),
    )
    return dataclasses.replace(
        plan,
        fixes=resolved.fixes,
        remote_cache=resolved.settings.remote_cache,
        toolchain_environ=kits.overlay({}, chosen),
        runpath=kits.runpath(dirs, chosen),
    )


def plan_build(
    request: BuildRequest,
    dirs: Dirs,
    environ: Mapping[str, str],
    settings: Callable[[], Settings],
    warn: Callable[[str], None] = lambda m: None,
) -> BuildPlan:
    """`resolve`, then `prepare`: what `build` runs."""
    return prepare(resolve(request, dirs, environ, settings, warn), dirs)


def pick_toolchains(dirs: Dirs, report: backends.Report, memo: Memo) -> tuple[kits.Added, ...]:
    """For each backend whose own toolchain here is incomplete, the one added toolchain for it, if exactly one is."""
    picked: list[kits.Added] = []
    for backend in dict.fromkeys(check.backend for check in report.failures):
        fitting = kits.fitting(dirs, backend)
        if len(fitting) > 1:
            raise UserError(
                f"several added toolchains could build {backend} here ({', '.join(a.id for a in fitting)}): "
                "pick one with --toolchain NAME"
            )
        for added in fitting:
            kits.require_intact(added, memo)
            picked.append(added)
    return tuple(picked)
