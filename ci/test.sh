#!/usr/bin/env bash
# The test command: install what the tests need on a fresh Debian/Ubuntu machine, then run the suite.
# The suite builds llama.cpp for real; ~/.cache/buildmgr-tests/ccache makes repeated runs fast.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(build-essential ccache git binutils python3-venv)
missing=()
for package in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
exec .venv/bin/python -m pytest -v -p no:cacheprovider tests "$@"
