#!/usr/bin/env bash
# What ci/workflows/artifacts.yml does, on this one machine: every matrix entry for this host's CPU, one after the
# other: build → package (with .sha256) → install-artifact into a fresh data dir → smoke there; then one SHA256SUMS.
# Usage: ci/artifacts-local.sh OUT_DIR [buildmgr matrix arguments…]   e.g. ci/artifacts-local.sh dist cpu vulkan
set -euo pipefail
out=${1:?usage: ci/artifacts-local.sh OUT_DIR [RECIPE… --sm LIST …]}
shift
buildmgr=${BUILDMGR:-buildmgr}
mkdir -p "$out"
cpu_arch=$(python3 -c "import platform; print({'x86_64': 'x64', 'aarch64': 'arm64', 'arm64': 'arm64'}[platform.machine()])")
"$buildmgr" matrix "$@" --cpu-arch "$cpu_arch" --format json >"$out/matrix.json"
python3 -c "import json, sys; [print('\t'.join(e['args'])) for e in json.load(open(sys.argv[1]))['include']]" \
    "$out/matrix.json" >"$out/builds.txt"
while IFS=$'\t' read -r -a args; do
    id=$("$buildmgr" "${args[@]}" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['id'])")
    archive=$("$buildmgr" package "$id" -o "$out" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['archive'])")
    fresh=$(mktemp -d)
    XDG_DATA_HOME=$fresh/data XDG_CACHE_HOME=$fresh/cache "$buildmgr" install-artifact "$archive"
    rm -rf "$fresh"
done <"$out/builds.txt"
(cd "$out" && cat ./*.tar.gz.sha256 >SHA256SUMS && sha256sum -c SHA256SUMS)
