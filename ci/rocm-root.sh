#!/usr/bin/env bash
# A throwaway Debian sid root with Debian's own ROCm 6.4 (hipcc, hipBLAS, rocBLAS under /usr), for the HIP tests:
# made once with mmdebstrap and kept in DEST (about 5 GB); rebuilt when missing, incomplete or made with another
# package list (kept in DEST/.ready). glslc, libvulkan-dev and spirv-headers are for hip+vulkan. Prints DEST.
# Nothing outside DEST changes (mmdebstrap runs apt inside the root). sid's Release file can be past its
# Valid-Until date between archive runs, hence the apt option.
set -euo pipefail
dest=${1:?usage: rocm-root.sh DEST}
packages=hipcc,libhipblas-dev,librocblas-dev,rocm-cmake,build-essential,ca-certificates,glslc,libvulkan-dev,spirv-headers
if [ "$(cat "$dest/.ready" 2>/dev/null)" != "$packages" ]; then
    bash "$(dirname "$0")/apt-install.sh" mmdebstrap
    # a run killed inside mmdebstrap can leave the root's /proc or /sys mounted: never delete through a mount
    rm -rf --one-file-system "$dest.tmp" "$dest"
    mkdir -p "$(dirname "$dest")"
    mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' --include="$packages" \
        sid "$dest.tmp" http://deb.debian.org/debian >&2
    echo "$packages" > "$dest.tmp/.ready"
    mv "$dest.tmp" "$dest"
fi
echo "$dest"
