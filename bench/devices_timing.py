"""Wall time of `buildmgr devices --refresh` and `buildmgr devices`, three runs each; with a prefix, also the
build's own start-up (`llama-bench --list-devices`) and the API child alone, the floor the refresh is held to."""

import subprocess
import sys
import time


def wall(command: list[str]) -> str:
    runs = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run(command, capture_output=True, check=True)
        runs.append(time.monotonic() - start)
    return ", ".join(f"{r:.2f} s" for r in runs)


for args in (["devices", "--refresh"], ["devices"]):
    print(f"buildmgr {' '.join(args)}: {wall([sys.executable, '-m', 'buildmgr', *args])}")
for prefix in sys.argv[1:]:
    print(f"{prefix}/bin/llama-bench --list-devices: {wall([f'{prefix}/bin/llama-bench', '--list-devices'])}")
    print(f"ggml API child alone: {wall([sys.executable, '-m', 'buildmgr.devices.ggml_api', f'{prefix}/lib'])}")
