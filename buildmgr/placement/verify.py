"""The verify run: the placement in a tiny llama-bench run, and whether it did what the rules predicted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from buildmgr.core import proc
from buildmgr.core.crashes import Crash
from buildmgr.core.findings import Finding, errors, first_match
from buildmgr.core.jsonshape import dump
from buildmgr.placement import rules
from buildmgr.placement.syntax import Placement, bench_args
from buildmgr.proof import postmortem

VERIFY_TIMEOUT_S = 120


@dataclass(frozen=True)
class VerifyOutcome:
    result: str  # ran | known | unknown | crashed
    exit_code: int | None
    failure: str = ""  # the rule's id; a crash's line
    tail: tuple[str, ...] = ()
    crash: Crash | None = None  # what a post-mortem found, where llama-bench died of a signal

    def to_json(self) -> dict[str, object]:
        told = {"crash": dump(self.crash)} if self.crash is not None else {}
        return {
            "result": self.result,
            "exit_code": self.exit_code,
            "failure": self.failure,
            "tail": list(self.tail),
        } | told


def classify(code: int | None, output: str) -> VerifyOutcome:
    tail = tuple(output.strip().splitlines()[-6:])
    if code == 0:
        return VerifyOutcome("ran", code)
    known = first_match((rule.signature for rule in rules.RULES), output)
    return VerifyOutcome("known", code, known.name, tail) if known else VerifyOutcome("unknown", code, "", tail)


def verify(
    bench: Path, model: Path, placement: Placement, environ: Mapping[str, str], *, user_model: bool
) -> VerifyOutcome:
    """Run llama-bench with the placement in a child, with a timeout; tiny runs (-p 1 -n 1 on a user's model)."""
    size = ["-p", "1", "-n", "1"] if user_model else ["-p", "16", "-n", "4"]
    command = [str(bench), "-m", str(model), *size, "-r", "1", "-v", *bench_args(placement)]
    ran = proc.run(command, env=dict(environ), timeout=VERIFY_TIMEOUT_S)
    if ran.timed_out:
        return VerifyOutcome("unknown", None, "", (ran.stderr,))
    outcome = classify(ran.returncode, ran.output)
    if outcome.result == "unknown" and ran.started and ran.returncode < 0:  # no rule's abort: where it died
        crash = postmortem.examine(command, ran, environ, postmortem.device_of(placement.devices))
        return VerifyOutcome("crashed", ran.returncode, crash.line(), crash.notes(), crash)
    return outcome


def agreement(findings: list[Finding], outcome: VerifyOutcome) -> str:
    """Did the run do what the rules predicted?"""
    predicted = errors(findings)
    if not predicted:
        if outcome.result == "crashed":  # the crash's line is its failure, said beside this already
            return "not predicted: it crashed"
        return (
            "as predicted: ran"
            if outcome.result == "ran"
            else f"not predicted: it failed ({outcome.failure or 'unknown failure'})"
        )
    if outcome.result == "ran":
        return "contradicted: " + ", ".join(sorted({f.rule for f in predicted})) + " predicted a failure, but it ran"
    if outcome.failure in {f.rule for f in predicted}:
        return f"as predicted: {outcome.failure}"
    return f"failed as predicted, but as {outcome.failure or 'an unknown failure'} (predicted {', '.join(sorted({f.rule for f in predicted}))})"
