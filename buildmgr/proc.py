"""The one way buildmgr runs a program and reads what it said: argument lists only (never a shell), output decoded
with undecodable bytes replaced, and a program that cannot start or runs past its timeout is an answer
(returncode -1), not an exception. Streaming a build into its log is builder's; running probes side by side is
probe's."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ran:
    returncode: int  # -1: it could not start, or it timed out
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run(
    command: list[str],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Ran:
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
        return Ran(-1, "", f"timed out after {timeout} s", round(time.monotonic() - start, 3), timed_out=True)
    except OSError as err:
        return Ran(-1, "", str(err), round(time.monotonic() - start, 3))
    return Ran(result.returncode, result.stdout, result.stderr, round(time.monotonic() - start, 3))
