"""Run one command with empty tmpfs mounts over some folders, as `python mounts.py SPEC` under `unshare --mount`: a
full disk (a small tmpfs over the data dir) or a host without a system CUDA toolkit (an empty one over it), in a
private mount namespace, so nothing outside changes and the mounts end with the command. No shell anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def command(argv: list[str], env: dict[str, str], mounts: dict[str, str]) -> list[str]:
    """The argument list that runs `argv` with a tmpfs of the given size ("64m") over each folder."""
    spec = json.dumps({"argv": argv, "env": env, "mounts": mounts})
    return ["unshare", "--mount", "--propagation", "private", sys.executable, __file__, spec]


def main(spec: dict) -> None:
    for folder, size in spec["mounts"].items():
        os.makedirs(folder, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder], check=True)
    os.execvpe(spec["argv"][0], spec["argv"], spec["env"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
