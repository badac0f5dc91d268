"""The one way buildmgr runs a program and reads what it said: argument lists only (never a shell), output decoded
with undecodable bytes replaced, and a program that cannot start or runs past its timeout is an answer
(returncode -1), not an exception. `run_together` starts several at once under one deadline (the probes, each
waiting on driver start-up); `stream` runs a build step into its log, line by line; `watch` hands each line over
with the moment it arrived (a benchmark's phases); `started` keeps a server running while its caller talks to it."""

from __future__ import annotations

import re
import shlex
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess


def which(name: str, environ: Mapping[str, str], *dirs: str) -> str | None:
    """A program in the first of these directories that has it, else on this environment's PATH (never the
    process's own: the environment is the one the command was given)."""
    import os
    import shutil

    for directory in dirs:
        if directory and os.access(os.path.join(directory, name), os.X_OK):
            return os.path.join(directory, name)
    return shutil.which(name, path=environ.get("PATH", os.defpath))


@dataclass(frozen=True)
class Ran:
    returncode: int  # -1 where it did not finish: it could not start, or it timed out
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    started: bool = True  # False: the OS refused to start it (stderr says why)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def failure(self) -> str:
        """Why it did not succeed, in a few words: a timeout, the OS's refusal, a signal, or the exit code and the
        last line it printed."""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s"
        if not self.started:
            return f"could not start: {self.stderr}"
        if self.returncode < 0:
            number = -self.returncode
            name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
            return f"crashed ({name})"
        last = (self.output.strip().splitlines() or ["no output"])[-1]
        return f"exit {self.returncode}: {last}"


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def run(
    command: list[str],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Ran:
    import subprocess  # here: a no-op build imports this module and starts no program

    start = time.monotonic()
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            cwd=cwd,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Ran(-1, "", f"timed out after {timeout} s", _since(start), timed_out=True)
    except OSError as err:
        return Ran(-1, "", str(err), _since(start), started=False)
    return Ran(result.returncode, result.stdout, result.stderr, _since(start))


def run_together(commands: list[list[str]], *, timeout: float, env: dict[str, str] | None = None) -> list[Ran]:
    """Start every command at once, wait for all, and kill those still running at the deadline (their output so far
    is kept)."""
    import subprocess  # here: a no-op build imports this module and starts no program

    start = time.monotonic()
    started: list[subprocess.Popen[str] | OSError] = []
    for command in commands:
        try:
            started.append(
                subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=env
                )
            )
        except OSError as err:
            started.append(err)
    results = []
    for process in started:
        if isinstance(process, OSError):
            results.append(Ran(-1, "", str(process), 0.0, started=False))
            continue
        try:
            out, said = process.communicate(timeout=max(0.0, start + timeout - time.monotonic()))
            results.append(Ran(process.returncode, out, said, _since(start)))
        except subprocess.TimeoutExpired:
            process.kill()
            out, said = process.communicate()
            results.append(Ran(-1, out, said, _since(start), timed_out=True))
    return results


def stream(
    command: list[str], log: Path, *, env: dict[str, str] | None = None, feed: Callable[[str], None] | None = None
) -> int:
    """Run it with both output streams, in order, appended to `log` line by line (so `tail -f` works) and handed to
    `feed`; its exit code. One that cannot start is -1, with the reason in the log."""
    import subprocess  # here: a no-op build imports this module and starts no program

    with open(log, "a", encoding="utf-8", buffering=1) as handle:
        handle.write(f"$ {shlex.join(command)}\n")
        try:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
            )
        except OSError as err:
            handle.write(f"could not start: {err}\n")
            return -1
        assert process.stdout is not None
        for line in process.stdout:
            handle.write(line)
            if feed is not None:
                feed(line)
        return process.wait()


# How long `watch`'s readers wait after each read: a program that logs thousands of lines a second (llama-bench -v
# prints a line for every graph a GPU backend replays, many per token where the CPU computes between them) wakes each
# reader at most this often instead of once a line, since every wake-up takes a CPU from threads that wait on each
# other; each line's arrival is known to within it.
GATHER_S = 0.005
_LINE_END = re.compile(rb"\r\n|\r|\n")  # as text mode reads them
_READ = 1 << 16


def watch(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float,
    on_start: Callable[[int], None] = lambda pid: None,
    on_line: Callable[[str, str, float], None] = lambda stream, line, at: None,
) -> Ran:
    """Run it and hand every line to `on_line(stream, line, time.monotonic() when it was read)` as it comes, from
    stdout and stderr apart (a benchmark's phases are told by when its lines arrive; lines read together share a
    moment, at most GATHER_S late); `on_start(pid)` once it runs. Killed at the timeout; its output so far is kept."""
    import os
    import subprocess  # here: a no-op build imports this module and starts no program
    import threading

    start = time.monotonic()
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as err:
        return Ran(-1, "", str(err), 0.0, started=False)
    on_start(process.pid)
    kept: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def pump(name: str, handle: IO[bytes]) -> None:
        pending = b""
        while chunk := os.read(handle.fileno(), _READ):
            at = time.monotonic()
            data = pending + chunk
            cut = len(data) - data.endswith(b"\r")  # a line end split between two reads is one
            *whole, pending = _LINE_END.split(data[:cut])
            pending += data[cut:]
            for raw in whole:
                line = raw.decode(errors="replace")
                kept[name].append(line + "\n")
                on_line(name, line, at)
            if len(chunk) < _READ:  # more waiting is read at once
                time.sleep(GATHER_S)
        if pending:
            line = pending.removesuffix(b"\r").decode(errors="replace")
            kept[name].append(line + "\n" if pending.endswith(b"\r") else line)
            on_line(name, line, time.monotonic())

    readers = [
        threading.Thread(target=pump, args=(name, handle), daemon=True)
        for name, handle in (("stdout", process.stdout), ("stderr", process.stderr))
    ]
    for reader in readers:
        reader.start()
    try:
        code = process.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        process.kill()
        code, timed_out = process.wait(), True
    for reader in readers:
        reader.join()
    for handle in (process.stdout, process.stderr):
        if handle is not None:
            handle.close()
    return Ran(-1 if timed_out else code, "".join(kept["stdout"]), "".join(kept["stderr"]), _since(start), timed_out)


@contextmanager
def started(command: list[str], log: Path, *, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A program that runs until told (a server), both its streams into `log`; stopped when the block ends (TERM,
    then KILL after five seconds). OSError where it cannot start."""
    import subprocess  # here: a no-op build imports this module and starts no program

    with open(log, "w", encoding="utf-8") as handle:
        handle.write(f"$ {shlex.join(command)}\n")
        handle.flush()
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            yield process
        finally:
            stop(process)


def stop(process: subprocess.Popen[Any]) -> None:
    """A program that still runs stopped: TERM, then KILL after five seconds."""
    import subprocess

    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
