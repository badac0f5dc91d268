"""The whole check of one command line: read its placements, take the build's devices here from the inventory (or a
fresh probe), check each placement, and with --verify run it. The edge of the placement package: it reads and runs;
the modules it calls do not."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr.core.findings import Finding, errors
from buildmgr.placement.check import Here, bench_words, check, memory_findings, model_devices, weights_per_device
from buildmgr.placement.cover import Covered, take
from buildmgr.placement.rules import KERNELS_REMOVED
from buildmgr.placement.syntax import Placement, describe, parse, shaping_args
from buildmgr.placement.verify import VerifyOutcome, agreement, verify

if TYPE_CHECKING:
    from buildmgr.backend_spec import RemovedKernels
    from buildmgr.core.config import Dirs
    from buildmgr.store import Build


def finding_json(finding: Finding) -> dict[str, str]:
    """A finding as `check --json` spells it (spec): its subject is the flag as written."""
    return {
        "severity": finding.severity.value,
        "flag": finding.subject,
        "message": finding.message,
        "fix": finding.fix,
        "rule": finding.rule,
    }


@dataclass(frozen=True)
class Tested:
    """One placement of the command line (llama-bench may hold several), its findings and its verify run."""

    placement: Placement
    findings: tuple[Finding, ...]
    outcome: VerifyOutcome | None = None  # with --verify
    weights: dict[str, int] | None = None  # with a model: bytes of weights each device would hold
    coverage: Covered | None = None  # with --model: where each op ran

    @property
    def agreement(self) -> str:
        return agreement(list(self.findings), self.outcome) if self.outcome is not None else ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "placement": self.placement.to_json(),
            "flags": describe(self.placement),
            "findings": [finding_json(f) for f in self.findings],
        }
        if self.weights is not None:
            data["weights_mib"] = {name: round(size / 2**20, 1) for name, size in self.weights.items()}
        if self.coverage is not None:
            data["coverage"] = self.coverage.to_json()
        if self.outcome is not None:
            data["verify"] = self.outcome.to_json() | {"agreement": self.agreement}
        return data


@dataclass(frozen=True)
class CheckReport:
    build: str
    tool: str
    probed_afresh: bool
    notes: tuple[Finding, ...]  # on the command line as a whole
    tests: tuple[Tested, ...]
    verified: bool

    @property
    def refused(self) -> list[Finding]:
        """What `run --check` will not run: llama.cpp's certain failures, and flags that ask for kernels the build's
        defines left out (it runs, with those ops on the CPU)."""
        found = [*self.notes, *(f for t in self.tests for f in t.findings)]
        return errors(found) + [f for f in found if f.rule == KERNELS_REMOVED]

    @property
    def exit_code(self) -> int:
        """1 where llama.cpp will certainly fail (or, verified, where a run did not run); else 0."""
        if errors(self.notes):  # a verify run in llama-bench's syntax cannot show these
            return 1
        if any(t.coverage is not None and t.coverage.failure and not errors(t.findings) for t in self.tests):
            return 1  # the coverage run itself failed
        if self.verified:
            return int(any(t.outcome is not None and t.outcome.result != "ran" for t in self.tests))
        return int(any(errors(t.findings) for t in self.tests))

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.build,
            "tool": self.tool,
            "probed_afresh": self.probed_afresh,
            "notes": [finding_json(f) for f in self.notes],
            "tests": [t.to_json() for t in self.tests],
            "exit_code": self.exit_code,
        }


def removed_kernels(build: Build) -> list[RemovedKernels]:
    """What the build's defines left out of its backends' kernels."""
    from buildmgr import backends

    recipe = build.receipt.recipe
    return backends.removed_kernels(recipe.backends, recipe.resolved_defines)


def here_for(dirs: Dirs, build: Build, environ: Mapping[str, str], servers: tuple[str, ...] = ()) -> tuple[Here, bool]:
    """The build's devices here under this environment (with `servers`, theirs too, as --rpc adds them), as the
    checks take them; and whether they were probed afresh (the stored probe was of another environment)."""
    from buildmgr.core import hostfacts
    from buildmgr.devices import inventory

    view = inventory.placement_view(dirs, build, environ, servers)
    here = Here(
        view.devices,
        view.default,
        build.receipt.source.commit or "",
        view.moved,
        {d.name: d.memory_free_mib for d in view.devices},
        hostfacts.available_mib(),
        tuple(removed_kernels(build)),
    )
    return here, view.fresh


def run_check(
    dirs: Dirs,
    build: Build,
    command: list[str],
    environ: Mapping[str, str],
    *,
    model: Path | None,
    run_verify: bool,
    run_coverage: bool = False,
    timeout_s: float = 30.0,
) -> CheckReport:
    """Parse TOOL ARGS… (TOOL checked by the caller), check every placement against the build's devices here, with
    `run_coverage` run it once on the model to see where each op runs, and with `run_verify` prove the check; a
    command that names RPC servers (--rpc) is checked against their devices too, each server asked first."""
    from buildmgr.core.config import ensure_writable
    from buildmgr.core.errors import UserError
    from buildmgr.proof.models import tiny_model

    placements, notes = parse(command[0], command[1:], dict(environ))
    user_model = model or next((Path(p.model) for p in placements if p.model), None)
    if user_model is not None and user_model.is_dir():
        raise UserError(f"model {user_model} is a directory: name the GGUF file")
    if user_model is not None and not user_model.is_file():
        raise UserError(f"model {user_model} does not exist")
    servers = next((p.servers for p in placements if p.servers), ())
    if servers:
        from buildmgr.fleet import endpoints

        endpoints.ready_for(build, servers, timeout_s)
    here, fresh = here_for(dirs, build, environ, servers)
    tests = []
    for candidate in placements:
        if user_model is not None and candidate.model is None:  # --model: the model the command would load
            candidate = dataclasses.replace(candidate, model=str(user_model))
        found = check(candidate, here)
        weights = None
        if user_model is not None:
            chosen, _ = model_devices(candidate, here)
            weights = weights_per_device(candidate, user_model, here, chosen)
            found += memory_findings(weights, here)
        covered = None
        if run_coverage and user_model is not None:
            if errors(found):
                covered = Covered(None, "not taken: the check above says llama.cpp would fail")
            else:
                args = [*bench_words(candidate), *shaping_args(command[0], command[1:])]
                covered = take(build.tool("llama-bench"), user_model, args, environ, here.removed)
        outcome = None
        if run_verify:
            ensure_writable(dirs.cache, "set XDG_CACHE_HOME to a writable directory")
            model_file = user_model or tiny_model(dirs.cache)
            outcome = verify(
                build.tool("llama-bench"), model_file, candidate, environ, user_model=user_model is not None
            )
        tests.append(Tested(candidate, tuple(found), outcome, weights, covered))
    return CheckReport(build.id, command[0], fresh, tuple(notes), tuple(tests), run_verify)
