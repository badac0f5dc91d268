"""Why a llama-bench run failed, found by running it again in the ways that tell: the weight types that fail alone,
the function it dies in (under gdb, where installed), where its weights were loaded (`-v`), and whether it runs with
the extra buffer types off (`--repack 0`); then the known fault it matches. Only after a failure: a run that passed
costs nothing here."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from buildmgr import backends
from buildmgr.core import proc
from buildmgr.core.crashes import Crash, assertion, innermost_frame, signal_name, weight_buffers, weight_types

TIMEOUT_S = 300
GDB_HINT = "gdb not found (apt-get install gdb names the function)"


def device_of(devices: Sequence[str] | None) -> str:
    """The device a run was asked to use, as a crash names it: `-dev none`, or none given, is the CPU."""
    return ",".join(devices) if devices and tuple(devices) != ("none",) else "CPU"


def with_model(command: Sequence[str], model: Path) -> list[str]:
    """The command with `-m`'s value replaced."""
    argv = list(command)
    at = argv.index("-m") + 1
    argv[at] = str(model)
    return argv


def under_gdb(command: Sequence[str], env: Mapping[str, str]) -> tuple[proc.Ran | None, str]:
    """The command run again under gdb in batch mode (its own output included), or None and why not."""
    gdb = shutil.which("gdb", path=env.get("PATH"))
    if gdb is None:
        return None, GDB_HINT
    script = ["-ex", "set debuginfod enabled off", "-ex", "set pagination off", "-ex", "run", "-ex", "bt 24"]
    return proc.run([gdb, "-q", "-batch", "-nx", *script, "--args", *command], timeout=TIMEOUT_S, env=dict(env)), ""


def examine(
    command: Sequence[str],
    ran: proc.Ran,
    env: Mapping[str, str],
    device: str,
    models: Mapping[str, Path] | None = None,
    *,
    extra: bool = True,
) -> Crash:
    """A failed llama-bench `command` (`ran`) on `device`, examined. `models`: a model of each weight type alone, so
    that the types that fail are named (the proof's); a user's model is examined as it is, its types from its load
    log. `extra`: run it once more with the extra buffer types off (the proof's short runs; not a whole benchmark)."""
    kinds: tuple[str, ...] = ()
    again = list(command)
    if models:
        alone = {
            kind: proc.run(with_model(command, model), timeout=TIMEOUT_S, env=dict(env))
            for kind, model in models.items()
        }
        kinds = tuple(kind for kind, result in alone.items() if not result.ok)
        if kinds:
            again = with_model(command, models[kinds[0]])
    verbose = again if "-v" in again else [*again, "-v"]
    died = signal_name(ran.returncode)
    traced, why = under_gdb(verbose, env) if died else (None, "it exited: no signal to trace")
    if traced is None:  # the run itself, where it was verbose already and nothing else changed
        traced = ran if verbose == list(command) else proc.run(verbose, timeout=TIMEOUT_S, env=dict(env))
    # ggml prints its own backtrace (through gdb) as it aborts: the first run's output names the function too
    frame = innermost_frame(traced.output) or innermost_frame(ran.output)
    if frame is None and why == "":
        why = "gdb timed out" if traced.timed_out else "gdb printed no backtrace (the run under gdb did not crash)"
    plain = proc.run([*again, "--repack", "0"], timeout=TIMEOUT_S, env=dict(env)).ok if extra else None
    crash = Crash(
        died,
        ran.returncode,
        device,
        kinds or weight_types(traced.output),
        frame[0] if frame else None,
        frame[1] if frame else None,
        weight_buffers(traced.output),
        plain,
        assertion(traced.output) or assertion(ran.output),
        why,
    )
    fault = backends.known_fault(crash)
    return replace(crash, fault=fault.name, explained=fault.explain()) if fault else crash
