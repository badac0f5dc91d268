"""llama.cpp's own fit, asked through the build's llama-fit-params: its answer for the model (the seed every tune
starts from, what `--fit` gives a user) and its estimate of the memory a placement needs on each device (the oracle
of what fits). The margins emulate a smaller card: llama.cpp leaves that much of the free memory unused."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from buildmgr.core import proc

TOOL = "llama-fit-params"
TIMEOUT_S = 600.0  # it loads no weights: seconds, even for a large model
HOST = "Host"  # the name it gives the host's memory


@dataclass(frozen=True)
class Need:
    """MiB a placement needs on one device, by llama.cpp's estimate."""

    device: str
    model: int
    context: int
    compute: int

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "context": self.context, "compute": self.compute, "total": self.total}


class FitFailed(Exception):
    """llama-fit-params refused or could not fit: its own last line."""


def parse_seed(stdout: str) -> tuple[int, tuple[str, ...]]:
    """`-c N -ngl N [-ts …] [-ot "…"]`: the context it chose and the other flags."""
    words = shlex.split(stdout.strip().splitlines()[-1]) if stdout.strip() else []
    if len(words) < 2 or words[0] != "-c" or not words[1].isdigit():
        raise FitFailed(f"{TOOL} printed no fitted flags: {stdout.strip()[-200:]!r}")
    return int(words[1]), tuple(words[2:])


def parse_free(log: str) -> dict[str, int]:
    """Each device's free MiB as llama.cpp saw it when it loaded (its load log's `using device` lines, which
    llama-fit-params prints with -v), read as `devices --parse` reads them."""
    from buildmgr.devices.captures import read_text

    return {d.name: d.memory_free_mib for d in read_text(log).devices if d.memory_free_mib is not None}


def parse_need(stdout: str) -> dict[str, Need]:
    """One line per device and one for the host: NAME MODEL CONTEXT COMPUTE (MiB)."""
    found = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            found[parts[0]] = Need(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))
    if HOST not in found:
        raise FitFailed(f"{TOOL} printed no estimate: {stdout.strip()[-200:]!r}")
    return found


def _run(tool: Path, args: list[str], environ: Mapping[str, str]) -> str:
    ran = proc.run([str(tool), *args], timeout=TIMEOUT_S, env=dict(environ))
    if not ran.ok:
        raise FitFailed(ran.failure())
    return ran.stdout


def seed(
    tool: Path, model: Path, ctx: int, margins: Sequence[int], environ: Mapping[str, str]
) -> tuple[int, tuple[str, ...]]:
    """What `--fit` gives a user of this model at this context, with these margins per device (MiB)."""
    args = ["-m", str(model), "-c", str(ctx)]
    if margins:
        args += ["-fitt", ",".join(str(m) for m in margins)]
    return parse_seed(_run(tool, args, environ))


def free_now(tool: Path, model: Path, ctx: int, environ: Mapping[str, str]) -> dict[str, int]:
    """The free memory of each device the model would use, as llama.cpp sees it now."""
    ran = proc.run(
        [str(tool), "-m", str(model), "-c", str(ctx), "-fitp", "on", "-v"], timeout=TIMEOUT_S, env=dict(environ)
    )
    if not ran.ok:
        raise FitFailed(ran.failure())
    return parse_free(ran.output)


def need(tool: Path, model: Path, ctx: int, words: Sequence[str], environ: Mapping[str, str]) -> dict[str, Need]:
    """What this placement needs on each device and on the host, by llama.cpp's own estimate."""
    return parse_need(_run(tool, ["-m", str(model), "-c", str(ctx), *words, "-fitp", "on"], environ))


def parse_threads(help_text: str) -> int | None:
    """llama-bench's default thread count, from its `--help` (`-t, --threads <n> (default: 16)`): what llama.cpp
    counts as the CPU's math cores (physical cores; a hybrid CPU's performance cores), which os.cpu_count() is not."""
    found = re.search(r"--threads <n>\s+\(default: (\d+)\)", help_text)
    return int(found.group(1)) if found else None


def default_threads(bench: Path, environ: Mapping[str, str]) -> int | None:
    return parse_threads(proc.run([str(bench), "--help"], timeout=60.0, env=dict(environ)).output)


def thread_levels(default: int, cpus: int) -> tuple[int, ...]:
    """-t values tried beside llama.cpp's default: half of what may run at once (decode reads memory; fewer threads
    may read it as fast and wait less for each other), the CPUs this process may use where llama.cpp's default
    counts more (it counts the host's cores, not an affinity mask or cpuset), and every CPU where that is more than
    the default (SMT siblings)."""
    usable = min(default, cpus)
    return tuple(sorted({t for t in (max(usable // 2, 1), usable, cpus) if t != default}))


def short(needs: Mapping[str, Need], capacity: Mapping[str, int | None], margin: int) -> list[str]:
    """Each device whose need (and llama.cpp's margin: the host has none) passes what it may hold, said with both
    numbers (empty: it fits)."""
    found = []
    for name, n in needs.items():
        room, kept = capacity.get(name), 0 if name == HOST else margin
        if room is not None and n.total + kept > room:
            also = f" and a margin of {kept}" if kept else ""
            found.append(
                f"{name} needs {n.total} MiB (model {n.model}, context {n.context}, compute {n.compute}){also}, "
                f"of {room} MiB"
            )
    return found
