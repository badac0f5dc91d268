#!/usr/bin/env bash
# Install the Debian/Ubuntu packages named that are not installed yet: as root, or through sudo.
# Quiet on stdout, so callers may capture what they print themselves.
set -euo pipefail
missing=()
for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
((${#missing[@]})) || exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
