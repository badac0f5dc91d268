"""Run one command inside a root directory (the Debian sid root of ci/rocm-root.sh), as `python in_root.py SPEC`
under `unshare --mount`: the folders named are bind-mounted at their own paths and /proc is mounted, all in a private
mount namespace, so nothing outside the root changes and the mounts end with the command. No shell anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def command(root: Path, argv: list[str], env: dict[str, str], binds: list, cwd: str) -> list[str]:
    """The argument list that runs `argv` inside `root` with `binds` visible there: a path (at the same path in the
    root) or a (path, path in the root) pair."""
    spec = json.dumps({"root": str(root), "argv": argv, "env": env, "binds": binds, "cwd": cwd})
    return ["unshare", "--mount", "--propagation", "private", sys.executable, __file__, spec]


def main(spec: dict) -> None:
    root = Path(spec["root"])
    for bind in spec["binds"]:
        source, inside = (bind, bind) if isinstance(bind, str) else bind
        target = root / inside.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", source, str(target)], check=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    os.chroot(root)
    os.chdir(spec["cwd"])
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
