#!/usr/bin/env bash
# Provision Vulkan for the tests on Debian 12: Mesa's lavapipe (a CPU Vulkan driver), glslc, the loader
# and vulkaninfo from Debian 12 itself, plus Vulkan headers new enough for the pinned llama.cpp.
# Debian 12's headers (1.3.239) are too old, so the next release's header-only libvulkan-dev and
# spirv-headers are downloaded with a private apt configuration (the system's sources, lists and
# cache stay untouched) and unpacked into $1. Prints the folder to use as VULKAN_SDK.
set -euo pipefail
dest=${1:?usage: vulkan-sdk.sh DEST}
next_release=trixie

bash "$(dirname "$0")/apt-install.sh" mesa-vulkan-drivers libvulkan1 glslc vulkan-tools

if [ ! -f "$dest/usr/include/vulkan/vulkan_core.h" ]; then
    # The Debian mirror this machine already uses, from its deb822 or one-line sources.
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '/^deb / && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || { echo "vulkan-sdk.sh: no Debian mirror found in the apt sources" >&2; exit 1; }
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $next_release main" >"$work/sources.list"
    apt_private=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
                 -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Architecture=amd64")
    apt-get "${apt_private[@]}" update -qq >&2
    (cd "$work/debs" && apt-get "${apt_private[@]}" download libvulkan-dev spirv-headers >&2)
    mkdir -p "$dest.tmp"
    for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$dest.tmp"; done
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
fi
echo "$dest/usr"
