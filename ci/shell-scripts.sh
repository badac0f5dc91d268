#!/usr/bin/env bash
# Every shell script of the repository parses (bash -n) and passes shellcheck (settings: .shellcheckrc), checked
# before the suite as ruff and mypy check the Python: the GPU-machine recorders run where no one watches them start.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -d '' scripts < <(git ls-files -z '*.sh' .ci/run)
for script in "${scripts[@]}"; do
    bash -n "$script"
done
.venv/bin/shellcheck "${scripts[@]}"
echo "ci/shell-scripts.sh: ${#scripts[@]} scripts parse and pass shellcheck"
