"""What llama.cpp was seen to do with a placement, as data: each rule's id, how its failure shows in a run's output,
what llama.cpp does, and the commit and hardware it was observed on (docs/real-runs.md). Which backends cannot split
rows or tensors is each backend module's own data (`SPLITS`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from buildmgr import backends
from buildmgr.core.findings import Finding, Severity, Signature

PIN = "0c1e570"  # the llama.cpp commit every rule below was observed at


@dataclass(frozen=True)
class Rule:
    """A failure of llama.cpp seen on a real run: how to recognise it, what llama.cpp does, where it was seen."""

    id: str
    signature: Signature  # over the tool's output
    what: str
    commit: str
    observed_on: str = ""

    def seen_at(self, commit: str) -> bool:
        return _same_commit(commit, self.commit)

    def error(self, flag: str, message: str, fix: str, commit: str) -> Finding:
        """This rule's certain failure, with a caveat for a build of another commit."""
        caveat = (
            ""
            if self.seen_at(commit)
            else f" (seen at {self.commit}; this build is {commit[:7] or 'of an unknown commit'}: --verify)"
        )
        return Finding(Severity.ERROR, flag, f"{message} → {self.what}{caveat}", fix, self.id)


def _same_commit(commit: str, observed: str) -> bool:
    """A build's full commit against an observation's short one (unknown is never the same)."""
    return bool(commit) and commit.startswith(observed)


def at_pin(commit: str) -> bool:
    """Is this build of the commit the rules were observed at?"""
    return _same_commit(commit, PIN)


def _rule(rule_id: str, pattern: str, what: str, observed_on: str = "") -> Rule:
    return Rule(rule_id, Signature(rule_id, pattern), what, PIN, observed_on)


RULES = (
    _rule("invalid-device", r"invalid device: \S+", "llama.cpp stops: invalid device", "2×H200"),
    _rule(
        "override-outside-devices",
        r"pre-allocated tensor .* in a buffer \(\S+\) that cannot run the operation",
        "abort (ggml-backend.cpp: pre-allocated tensor in a buffer that cannot run the operation)",
        "2×H200",
    ),
    _rule(
        "unknown-buffer-type",
        r"unknown buffer type|unrecognized buffer type",
        "llama.cpp stops: unknown buffer type",
        "2×H200",
    ),
    _rule(
        "row-split-unsupported",
        r"does not support split buffers",
        "model load fails: the device does not support split buffers",
        "2×H200",
    ),
    _rule(
        "tensor-split-unsupported",
        r"unsupported mul_mat split states",
        "abort (ggml-backend-meta.cpp: unsupported mul_mat split states)",
        "2×H200",
    ),
    _rule(
        "main-gpu-out-of-range",
        r"invalid value for main_gpu",
        "model load fails: invalid value for main_gpu",
        "2×H200",
    ),
    _rule(
        "remote-op-unsupported",
        r"Remote RPC server crashed or returned malformed response",
        "the server aborts on an op its card has no kernel for, and every client of it fails (seen: -fa auto on a "
        "server built without FlashAttention kernels, fattn.cu 'fatal error')",
        "H100",
    ),
    _rule("load-failed", r"failed to load model", "model load failed"),
)
BY_ID = {rule.id: rule for rule in RULES}
# Notes and warnings that carry a rule id without a certain failure behind it.
NO_EQUALS_FORM = "no-equals-form"
BENCH_COMMA = "bench-comma"
ONE_CARD_TWICE = "one-card-twice"
CROSS_BACKEND_LAYER = "cross-backend-layer"
REMOTE_OP = "remote-op-unsupported"
# Not a failure: llama.cpp runs, with the ops the build's defines left out on the CPU (the run --check refuses it).
KERNELS_REMOVED = "kernels-removed"


def split_verdicts(split_mode: str, backend_names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """For a split mode over devices of these backends: ({backend: the rule it fails by}, [backends seen to run it]).
    A backend in neither was never observed with it."""
    failing: dict[str, str] = {}
    ran: list[str] = []
    for name in sorted(backend_names):
        observed = backends.splits(name)
        if split_mode in observed:
            verdict = observed[split_mode]
            if verdict is None:
                ran.append(name)
            else:
                failing[name] = verdict
    return failing, ran


def runs_split(split_mode: str) -> list[str]:
    """Every backend observed to run this split mode."""
    return [name for name in backends.known_backends() if backends.splits(name).get(split_mode, "") is None]
