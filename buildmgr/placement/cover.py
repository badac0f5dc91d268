"""The coverage run: llama-bench once on the model with the placement, the scheduler's assignments printed
(GGML_SCHED_DEBUG=2, -v), read by `coverage` into where each op of the prefill and the decode graph ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from buildmgr.backend_spec import RemovedKernels
from buildmgr.core import proc
from buildmgr.placement import coverage

COVER_TIMEOUT_S = 300
SCHED_DEBUG = {"GGML_SCHED_DEBUG": "2"}  # 2: every node with its backend, not only the splits


@dataclass(frozen=True)
class Covered:
    coverage: coverage.Coverage | None
    failure: str = ""  # why there is none: the run failed, or printed no graph

    def to_json(self) -> dict[str, object]:
        if self.coverage is None:
            return {"taken": False, "failure": self.failure}
        return {"taken": True} | self.coverage.to_json()

    def summary(self) -> dict[str, object]:
        """What a bench row keeps: per graph its splits and bytes copied per token, the ops off their layers'
        device, and the partial line."""
        if self.coverage is None:
            return {"taken": False, "failure": self.failure}
        graphs = {
            g.phase: {
                "splits": g.splits,
                "copied_bytes_per_token": round(g.copied_per_token),
                "off_layer_device": [o.to_json() for o in g.off],
            }
            for g in self.coverage.graphs
        }
        return {"taken": True, "partial": self.coverage.partial, "graphs": graphs}


def command(bench: Path, model: Path, args: Sequence[str], n_prompt: int) -> list[str]:
    """A context of the run's prompt size (its prefill graph is reserved at min(n_ctx, n_ubatch) tokens, and its
    one-token decode graph beside it), one prefill and no warm-up: seconds, not a benchmark."""
    size = ["-p", str(n_prompt), "-n", "0", "-r", "1", "--no-warmup"]
    return [str(bench), "-m", str(model), *size, "-v", *args]


def take(
    bench: Path,
    model: Path,
    args: Sequence[str],
    environ: Mapping[str, str],
    removed: Sequence[RemovedKernels],
    n_prompt: int = 512,
) -> Covered:
    ran = proc.run(command(bench, model, args, n_prompt), env=dict(environ) | SCHED_DEBUG, timeout=COVER_TIMEOUT_S)
    if ran.timed_out:
        return Covered(None, f"the coverage run took over {COVER_TIMEOUT_S} s")
    if not ran.ok:
        return Covered(None, ran.failure())
    found = coverage.cover(coverage.read(ran.stderr), removed)
    if found is None:
        return Covered(None, "llama-bench printed no scheduler assignments (GGML_SCHED_DEBUG with -v)")
    return Covered(found)
