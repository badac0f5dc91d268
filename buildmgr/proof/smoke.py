"""Prove a staged build runs: every tool's --version, then llama-bench on the kernels model (`proof_models`) on the CPU
and on each device; a failure is examined (`postmortem`) and told as a crash with its known fault and fix."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.backends import NOT_A_CARD
from buildmgr.core import proc
from buildmgr.core.config import Dirs
from buildmgr.core.crashes import Crash
from buildmgr.core.errors import TAIL_LINES, BuildFailed
from buildmgr.devices.probe import ProbeResult, probe_build
from buildmgr.proof import postmortem
from buildmgr.proof.models import KERNEL_TYPES, KERNELS_VERSION, kernels_model
from buildmgr.store.receipt import SmokeResult, ToolRun

if TYPE_CHECKING:
    from buildmgr.core.progress import Reporter

TIMEOUT_S = 300
VERSIONED_TOOLS = ("llama-cli", "llama-server", "llama-bench", "llama-completion")
# A prefill of one whole micro-batch (the quantized matrix kernels, repacked buffers, a GPU's batched paths) and a
# decode (the vector kernels), on the kernels model
BENCH_ARGS = ("-p", "512", "-n", "8", "-r", "1", "-o", "json")


def version_check(tool: Path, short_commit: str, env: dict[str, str]) -> ToolRun:
    ran = proc.run([str(tool), "--version"], timeout=TIMEOUT_S, env=env)
    output = ran.output  # --version prints to stderr
    line = next((ln for ln in output.splitlines() if ln.startswith("version:")), "")
    # "version: 0.5.0-dev (build 0, commit 0c1e570)"; older trees print "version: 0 (0c1e570)"
    passed = ran.ok and (short_commit == "unknown" or re.search(rf"\b{short_commit}\b", line) is not None)
    detail = line or output.strip()[-400:]
    return ToolRun([tool.name, "--version"], ran.returncode, ran.seconds, passed, detail)


@dataclass(frozen=True)
class Models:
    """The proof's models: the kernels model, and one of each weight type alone (run only after a failure)."""

    kernels: Path
    alone: Mapping[str, Path]

    @classmethod
    def in_cache(cls, cache_dir: Path) -> Models:
        return cls(kernels_model(cache_dir), {kind: kernels_model(cache_dir, kind) for kind in KERNEL_TYPES})


def bench_check(tool: Path, models: Models, env: dict[str, str], device: str) -> ToolRun:
    """llama-bench on the kernels model on one device (`none`: the CPU); a failure is examined (`postmortem`)."""
    command = [str(tool), "-m", str(models.kernels), *BENCH_ARGS, "-dev", device]
    ran = proc.run(command, timeout=TIMEOUT_S, env=env)
    passed, detail = False, ran.output.strip()[-400:]
    if ran.ok:
        try:
            results = json.loads(ran.stdout)
            speeds = [
                f"{'pp' if r['n_prompt'] else 'tg'}{r['n_prompt'] or r['n_gen']} {r['avg_ts']:.0f} t/s" for r in results
            ]
            where = results[0].get("devices", "?") if results else "?"
            passed, detail = bool(results), f"on {'CPU' if where == 'none' else where}: " + ", ".join(speeds)
        except (ValueError, KeyError, TypeError, IndexError):
            pass
    shown = [tool.name, "-m", models.kernels.name, *command[3:]]
    if passed or ran.timed_out or not ran.started:
        return ToolRun(shown, ran.returncode, ran.seconds, passed, detail)
    crash = postmortem.examine(command, ran, env, postmortem.device_of([device]), models.alone)
    told = "; ".join(filter(None, (crash.line(), crash.findings())))
    return ToolRun(shown, ran.returncode, ran.seconds, False, f"{told}\n{detail}".strip(), crash)


class ProofFailed(BuildFailed):
    """The proof's kernels run failed, and a post-mortem told how (a known fault has a fix a build can take)."""

    def __init__(self, message: str, *, log: Path, tail: tuple[str, ...], hints: tuple[str, ...], crash: Crash) -> None:
        super().__init__(message, log=log, tail=tail, hints=hints)
        self.crash = crash


@dataclass(frozen=True)
class Smoked:
    result: SmokeResult
    probe: ProbeResult | None  # the probe that named the devices benched (None: no llama-bench to bench with)


def smoke_run(prefix: Path, short_commit: str, models: Models, environ: Mapping[str, str]) -> Smoked:
    """--version of every tool, then llama-bench on the kernels model on the CPU and on every device the build lists
    here.

    The runs are independent (each its own process, each device its own bench), so they run side by side: the smoke
    run of a many-device build takes about as long as its slowest device, not their sum. The CPU's bench needs no
    probe, so it runs beside it."""
    env = dict(environ)  # the user's own, LD_LIBRARY_PATH included: RPATH wins over it
    bindir = prefix / "bin"
    bench = bindir / "llama-bench"
    tools = [bindir / name for name in VERSIONED_TOOLS if (bindir / name).exists()]
    devices: tuple[str, ...] = ()
    listed = None
    with ThreadPoolExecutor(max_workers=8) as pool:
        versions = [pool.submit(version_check, tool, short_commit, env) for tool in tools]
        benches = []
        if bench.exists():
            benches.append(pool.submit(bench_check, bench, models, env, "none"))
            listed = probe_build(prefix, env)
            devices = tuple(d.name for d in listed.devices if d.backend not in NOT_A_CARD)
            benches += [pool.submit(bench_check, bench, models, env, name) for name in devices]
        checks = [future.result() for future in versions + benches]
    passed = bool(checks) and all(c.passed for c in checks)
    return Smoked(SmokeResult(passed, tuple(checks), devices, KERNELS_VERSION if bench.exists() else None), listed)


def prove_runs(
    staging: Path, short_commit: str, dirs: Dirs, log: Path, reporter: Reporter, environ: Mapping[str, str]
) -> Smoked:
    """Run the staged build; raise (so nothing is published) unless every check passed."""
    smoked = smoke_run(staging, short_commit, Models.in_cache(dirs.cache), environ)
    result = smoked.result
    with open(log, "a", encoding="utf-8") as handle:
        handle.writelines(f"smoke: {shlex.join(c.command)} -> {c.returncode}: {c.detail}\n" for c in result.checks)
    for check in result.checks:
        what = " ".join(check.command[:2]) if "--version" in check.command else check.command[0]
        reporter.say(f"  {'✓' if check.passed else '✗'} {what}: {check.detail[:120]}")
    if result.passed:
        return smoked
    failed = result.failures[0] if result.failures else None
    if failed is None:
        raise BuildFailed("smoke run failed (no llama tools in the prefix); the build was not published", log=log)
    crashed = failed.crash
    if crashed is not None and crashed.signal is not None:
        raise ProofFailed(
            f"the proof failed: {crashed.line()}; the build was not published",
            log=log,
            tail=(crashed.findings(),),
            hints=tuple(known for known in (crashed.known(),) if known),
            crash=crashed,
        )
    last = failed.detail.splitlines()[-1][:160] if failed.detail else "no output"
    raise BuildFailed(
        f"smoke run failed ({' '.join(failed.command[:2])}: exit {failed.returncode}, {last}); "
        "the build was not published",
        log=log,
        tail=tuple(failed.detail.splitlines()[-TAIL_LINES:]),
    )
