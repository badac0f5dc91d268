"""The build pipeline in order: configure, prove the backends, build, install to staging, smoke run, publish with a
receipt. The orchestration; each stage's logic is in its own module."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildmgr import __version__, backends, store
from buildmgr.backend_spec import RuntimeFault
from buildmgr.building import runtime, source
from buildmgr.building.install import install_targets
from buildmgr.building.plan import BuildPlan, rpath_defines
from buildmgr.building.recipes import BASE_DEFINES
from buildmgr.core import hostfacts, proc
from buildmgr.core.config import Dirs
from buildmgr.core.errors import TAIL_LINES, BuildFailed
from buildmgr.core.fsutil import locked
from buildmgr.core.jsonshape import dump
from buildmgr.core.progress import Reporter
from buildmgr.proof import fileapi, host_faults
from buildmgr.proof.diagnose import diagnose
from buildmgr.proof.smoke import ProofFailed, prove_runs
from buildmgr.store.receipt import SCHEMA as RECEIPT_SCHEMA
from buildmgr.store.receipt import Receipt
from buildmgr.tools import compile_cache
from buildmgr.tools.cmake import Reply, read_reply, request_reply


def error_excerpt(lines: list[str], limit: int = TAIL_LINES) -> tuple[str, ...]:
    """The lines a person needs: from Ninja's first FAILED: or CMake's first error, else the end."""
    for marker in ("FAILED: ", "CMake Error"):
        for index, line in enumerate(lines):
            if line.startswith(marker):
                return tuple(line.rstrip() for line in lines[index : index + limit])
    return tuple(line.rstrip() for line in lines[-limit:])


def _fail(message: str, log: Path) -> BuildFailed:
    text = log.read_text(encoding="utf-8", errors="replace")
    return BuildFailed(message, log=log, tail=error_excerpt(text.splitlines()), hints=tuple(diagnose(text)))


@dataclass(frozen=True)
class BuildTree:
    """`<cache>/build-trees/<id>/`: `build/` and `src`, a link to the source. Every compile runs in `build/` and
    (through ccache's base dir) names its source `../src/…`, the same on every machine: cache entries are shared
    across data dirs and hosts, and `-ffile-prefix-map` turns it into `ggml/src/…` in the binaries."""

    root: Path

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def src(self) -> Path:
        return self.root / "src"

    def link(self, source: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.src.is_symlink() and os.readlink(self.src) == str(source):
            return
        temporary = self.root / f".src.{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(source, temporary)
        os.replace(temporary, self.src)

    def forget_configure(self) -> None:
        """What `cmake --fresh` removes (CMake 3.24; buildmgr takes 3.18): `CMakeCache.txt` and the top `CMakeFiles/`.

        A configure reads the cache an earlier one left: llama.cpp turns `GGML_LLAMAFILE_DEFAULT` on only while
        `GGML_LLAMAFILE` is not cached, and ggml-config.cmake records every `GGML_` variable it sees, so a tree
        configured again installs other bytes than a fresh one (issue #50 item 9). The objects and Ninja's log stay:
        what compiles with the same command is not compiled again."""
        (self.build / "CMakeCache.txt").unlink(missing_ok=True)
        if (self.build / "CMakeFiles").is_dir():
            shutil.rmtree(self.build / "CMakeFiles")


def build_env(
    plan: BuildPlan,
    dirs: Dirs,
    tree: BuildTree,
    statslog: Path,
    environ: Mapping[str, str],
    remote: compile_cache.RemoteCache | None = None,
) -> dict[str, str]:
    env = dict(environ) | plan.toolchain_environ
    if remote is not None:
        env["CCACHE_REMOTE_STORAGE"] = remote.for_ccache
    if plan.toolchain.ccache.found:  # CMake's default launcher, for projects that configure during the build
        env |= {f"CMAKE_{lang}_COMPILER_LAUNCHER": str(plan.toolchain.ccache.path) for lang in ("C", "CXX")}
    if plan.source.commit_time is not None:  # __DATE__ and __TIME__, where a file uses them
        env.setdefault("SOURCE_DATE_EPOCH", str(plan.source.commit_time))
    env.update(
        {
            "CCACHE_DIR": str(dirs.ccache),
            # Paths under the base dir are made relative, so every build dir hits the same entries.
            "CCACHE_BASEDIR": str(tree.root),
            "CCACHE_NOHASHDIR": "1",
            "CCACHE_STATSLOG": str(statslog),
            "NINJA_STATUS": "[%f/%t] ",
        }
    )
    for cache in backends.shader_caches():  # they log to one file: a build runs one backend's shaders at most
        env |= cache.environ(shader_statslog(statslog))
    return env


def shader_statslog(statslog: Path) -> Path:
    return statslog.with_suffix(".shader-stats")


def shader_launcher(plan: BuildPlan, tree: BuildTree, dirs: Dirs) -> dict[str, str]:
    """Each shader compiler the recipe's backends found behind the shader cache."""
    return {
        cache.define: str(cache.launcher(tree.root, plan.host_defines[cache.define], dirs.shader_cache))
        for cache in backends.shader_caches()
        if cache.define in plan.host_defines
    }


def reproducible_defines(tree: BuildTree) -> dict[str, str]:
    """No path of this host in the binaries: source paths in assert and abort messages read `ggml/src/…`.

    With ccache the compiler sees `../src/…` (its base dir makes paths relative), without it absolute paths, and
    CMake's unity sources include absolute paths unless told to be relocatable. ccache keeps hitting across data
    dirs with these maps (it rewrites the ones under its base dir before hashing)."""
    maps = ("../src/=", f"{tree.src}/=", f"{tree.build}/=")
    flags = " ".join(f"-ffile-prefix-map={m}" for m in maps)
    return {"CMAKE_C_FLAGS_INIT": flags, "CMAKE_CXX_FLAGS_INIT": flags, "CMAKE_UNITY_BUILD_RELOCATABLE": "ON"}


def configure_command(plan: BuildPlan, tree: BuildTree, launchers: dict[str, str] | None = None) -> list[str]:
    tools = plan.toolchain
    rpath = rpath_defines(hostfacts.read().system, plan.runpath)
    defines = dict(plan.defines) | plan.host_defines | rpath | reproducible_defines(tree) | (launchers or {})
    if tools.ccache.found:
        defines |= {f"CMAKE_{lang}_COMPILER_LAUNCHER": str(tools.ccache.path) for lang in backends.languages()}
    return [
        str(tools.cmake.path),
        "-S",
        str(tree.src),
        "-B",
        str(tree.build),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={tools.ninja.path}",
        *(f"-D{key}={value}" for key, value in sorted(defines.items())),
    ]


def _prove_backends(plan: BuildPlan, reply: Reply, log: Path) -> None:
    """Fail before compiling if configure silently dropped a backend or ignored one of our options."""
    asked = dict(BASE_DEFINES) | dict(plan.recipe.defines) | dict(plan.arch.defines)
    problems = fileapi.backend_problems(reply, plan.recipe.backends) + fileapi.missing_targets(reply, plan.targets)
    ignored = fileapi.ignored_options(reply, asked)
    if ignored:
        problems.append(
            f"option(s) {', '.join(ignored)} are not declared by this llama.cpp (typo, or too old a source)"
        )
    if problems:
        with open(log, "a", encoding="utf-8") as handle:
            handle.writelines(f"proof: {p}\n" for p in problems)
        raise BuildFailed("configure did not produce the requested build: " + "; ".join(problems), log=log)


def _drop_statslogs(statslog: Path) -> None:
    statslog.unlink(missing_ok=True)
    shader_statslog(statslog).unlink(missing_ok=True)


def _shader_counts(statslog: Path) -> dict[str, int] | None:
    """Shader compiles served by the shader cache (hit), compiled and stored (miss), or run as given (direct)."""
    path = shader_statslog(statslog)
    caches = backends.shader_caches()
    return caches[0].counts(path.read_text(encoding="ascii")) if path.exists() and caches else None


def _runtime_needs(staging: Path, log: Path) -> dict[str, object]:
    try:
        return runtime.scan_prefix(staging)
    except ValueError as err:
        raise BuildFailed(f"cannot read what the build needs at run time: {err}", log=log) from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Configured:
    """A build tree that configure produced and the File API reply proved: the requested backends are in."""

    build_dir: Path
    log: Path
    targets: tuple[str, ...]  # the recipe's tools plus each backend's ggml target

    def to_json(self) -> dict[str, object]:
        return {"build_dir": str(self.build_dir), "log": str(self.log), "targets": list(self.targets)}


def _log_paths(plan: BuildPlan, dirs: Dirs) -> tuple[Path, Path]:
    log = store.run_log(dirs, plan.build_id)
    return log, log.with_suffix(".ccache-stats")


def _configure(
    plan: BuildPlan, tree: BuildTree, dirs: Dirs, reporter: Reporter, log: Path, env: dict[str, str]
) -> Reply:
    with reporter.phase("fetch"):
        source.materialize(plan.source, dirs)
    with reporter.phase("configure"):
        tree.link(plan.source.path)
        tree.build.mkdir(parents=True, exist_ok=True)
        tree.forget_configure()  # same inputs, same bytes, whatever the tree's history
        request_reply(tree.build)
        if proc.stream(configure_command(plan, tree, shader_launcher(plan, tree, dirs)), log, env=env) != 0:
            raise _fail("configure failed", log)
        reply = read_reply(tree.build)
        _prove_backends(plan, reply, log)
    return reply


def _targets(plan: BuildPlan, reply: Reply) -> tuple[str, ...]:
    """The recipe's tools, plus each backend's ggml target: a DL backend is built only when named."""
    return tuple(dict.fromkeys(plan.targets + fileapi.backend_targets(reply, plan.recipe.backends)))


def configure_only(plan: BuildPlan, dirs: Dirs, reporter: Reporter, environ: Mapping[str, str]) -> Configured:
    """Preflight, configure and proof without compiling: minutes of nvcc saved when a flag is wrong."""
    tree = BuildTree(dirs.build_trees / plan.build_id)
    log, statslog = _log_paths(plan, dirs)
    with locked(store.build_lock(dirs, plan.build_id)):
        reporter.say(f"configuring [bold]{plan.build_id}[/] from {plan.source.origin}; log: {log}")
        try:
            reply = _configure(plan, tree, dirs, reporter, log, build_env(plan, dirs, tree, statslog, environ))
        finally:
            _drop_statslogs(statslog)
    targets = _targets(plan, reply)
    reporter.say(f"[green]configured[/] {plan.build_id} in {tree.build}: {', '.join(plan.recipe.backends)} proven")
    return Configured(tree.build, log, targets)


def execute(
    plan: BuildPlan, dirs: Dirs, reporter: Reporter, environ: Mapping[str, str], *, rebuild: bool = False
) -> store.Build:
    """Run the whole pipeline; the prefix appears only if every stage passed.

    Under the build's lock the receipt is read again: a build of the same id that finished while this one waited
    is used, not compiled a second time (unless `rebuild`).
    """
    prefix = plan.prefix(dirs.builds)
    tree = BuildTree(dirs.build_trees / plan.build_id)
    with locked(store.build_lock(dirs, plan.build_id)):
        finished = None if rebuild else store.load_receipt(prefix)
        if isinstance(finished, store.Unreadable):
            reporter.warn(f"{finished}; building it again replaces it")
        elif finished is not None:
            reporter.say(f"{plan.build_id} was built by another buildmgr while this one waited; using it → {prefix}")
            return store.Build(plan.build_id, prefix, finished)
        store.drop_stale_staging(dirs, plan.build_id)  # left by a run of this id that was killed: we hold its lock
        log, statslog = _log_paths(plan, dirs)
        started, clock = _now(), time.monotonic()
        reporter.say(
            f"building [bold]{plan.build_id}[/] from {plan.source.origin} ({plan.source.short_commit}); log: {log}"
        )
        for fix in plan.fixes:
            reporter.warn(f"{fix.fault}: {fix.line()}")
        try:
            remote = (
                compile_cache.usable_remote(plan.remote_cache, reporter.warn) if plan.toolchain.ccache.found else None
            )
            env = build_env(plan, dirs, tree, statslog, environ, remote)
            reply = _configure(plan, tree, dirs, reporter, log, env)
            targets = _targets(plan, reply)
            with reporter.phase("build", f"{', '.join(plan.targets)} with -j{plan.jobs}", spinner=False):
                command = [
                    str(plan.toolchain.cmake.path),
                    "--build",
                    str(tree.build),
                    "-j",
                    str(plan.jobs),
                    "--target",
                    *targets,
                ]
                with reporter.ninja_bar() as feed:
                    if proc.stream(command, log, env=env, feed=feed) != 0:
                        raise _fail("build failed", log)
            with store.staged(dirs, plan.build_id) as staging:
                with reporter.phase("install"):
                    install_targets(reply, plan.source.path, tree.build, targets, staging, plan.left_out)
                    if (plan.source.path / "LICENSE").is_file():  # a package of the prefix carries it, like upstream's
                        shutil.copy2(plan.source.path / "LICENSE", staging / "LICENSE")
                    needs = _runtime_needs(staging, log)
                with reporter.phase("smoke"):
                    result = prove_runs(staging, plan.source.short_commit, dirs, log, reporter, environ).result
                receipt = Receipt.from_json(  # checked here, so that every receipt written can be read back
                    {
                        "schema": RECEIPT_SCHEMA,
                        "id": plan.build_id,
                        "buildmgr": __version__,
                        "recipe": plan.recipe.to_json()
                        | {"resolved_defines": dict(plan.defines), "arch": plan.arch.label},
                        "host_defines": plan.host_defines,
                        "backend_versions": plan.backend_versions,
                        "source": plan.source.to_json(),
                        "toolchain": plan.toolchain.to_json(),
                        "host": hostfacts.read().receipt_json(),
                        "jobs": plan.jobs,
                        "started": started,
                        "finished": _now(),
                        "seconds": round(time.monotonic() - clock, 3),
                        "phases": dict(reporter.timings),
                        "ccache": compile_cache.parse_statslog(statslog.read_text()) if statslog.exists() else None,
                        "shader_cache": _shader_counts(statslog),
                        "smoke": result.to_json(),
                        "runtime": needs,
                        "log": str(log),
                        "files": store.file_hashes(staging),
                        "toolchains": [dump(ref) for ref in plan.toolchains],
                        "fixes": [dump(fix) for fix in plan.fixes],
                    }
                )
                store.publish(staging, prefix, receipt)
        finally:
            _drop_statslogs(statslog)
    reporter.say(f"[green]built[/] {plan.build_id} → {prefix}; {compile_cache.summary(receipt.ccache)}")
    return store.Build(plan.build_id, prefix, receipt)


def learn(plan: BuildPlan, failed: ProofFailed, dirs: Dirs, reporter: Reporter) -> RuntimeFault | None:
    """A proof that crashed on a known fault whose fix applies to this build: remember it for this compiler and CPU
    (so that the next plan, and every later build, leaves it out) and say so. None: no fix applies."""
    crash = failed.crash
    fault = backends.runtime_fault(crash.fault) if crash.fault else None
    if fault is None or fault.fix(dict(plan.defines), hostfacts.read().cpu_flags) is None:
        return None
    compiler, cpu = host_faults.here(plan.toolchain)
    host_faults.remember(dirs, host_faults.seen_now(fault, crash.line(), plan.build_id, compiler, cpu))
    reporter.warn(f"{plan.build_id} was not published: {crash.line()}")
    reporter.warn(f"{fault.name}: {fault.cause}")
    return fault
