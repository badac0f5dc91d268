#!/usr/bin/env bash
# Issue #32 on a lent H200: build cpu, vulkan, cuda --sm 80 and cuda --sm 90 (FlashAttention kernels off), package
# them, publish them signed to Debian's docker-registry on 127.0.0.1 and to a directory, then `install --from` into
# fresh data dirs: the whole index (the pick should be sm_90 CUDA, proved by CUDA0), the directory without the sm_90
# archive (sm_80 by PTX JIT), and CUDA_VISIBLE_DEVICES= (the CUDA ones do not fit: Vulkan, proved by Vulkan0).
# PAYLOAD as bench/recorders/gpu-payload.sh makes it. Long: start it with setsid nohup and poll OUT/finished.
set -uo pipefail
payload=${1:?usage: gpu-repository.sh PAYLOAD OUT}
out=${2:?usage: gpu-repository.sh PAYLOAD OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
export PATH=/tmp/site/bin:$PATH
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,compute_cap --format=csv >"$out/gpus.txt" 2>&1

log "builds"
for spec in "cpu" "vulkan" "cuda --sm 80 -D GGML_CUDA_FA=OFF" "cuda --sm 90 -D GGML_CUDA_FA=OFF"; do
    tag=$(echo "$spec" | tr ' ' '_')
    start=$(date +%s)
    # shellcheck disable=SC2086
    bm build $spec -j 16 --json >"$out/build-$tag.json" 2>"$out/build-$tag.txt"
    echo "exit $? seconds $(( $(date +%s) - start ))" >>"$out/build-$tag.txt"
    id=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['id'])" "$out/build-$tag.json")
    bm package "$id" -o /tmp/dist --json >"$out/package-$tag.json" 2>>"$out/build-$tag.txt"
    log "built $spec ($id)"
done

log "registry and publish"
mkdir -p /tmp/reg/data
cat >/tmp/reg/config.yml <<'EOF'
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: /tmp/reg/data
http:
  addr: 127.0.0.1:5000
EOF
(setsid docker-registry serve /tmp/reg/config.yml >/tmp/reg/log 2>&1 < /dev/null &)
sleep 2
oci=oci://127.0.0.1:5000/llama/builds
XDG_CONFIG_HOME=/tmp/ci-config bm key generate ci >"$out/key.txt" 2>&1
key=$(tail -1 "$out/key.txt")
for repo in "$oci" /tmp/repo; do
    XDG_CONFIG_HOME=/tmp/ci-config bm publish /tmp/dist/*.tar.gz --to "$repo" --sign ci --builder "h200 $(hostname)" \
        --json >"$out/publish-$(basename "$repo").json" 2>"$out/publish-$(basename "$repo").txt"
done
bm repo list "$oci" >"$out/repo-list.txt" 2>&1

install_in() {  # NAME REPO [VAR=VALUE…]: a fresh host that trusts the key, the table, then the install
    local name=$1 repo=$2
    shift 2
    local root=/tmp/host-$name start
    local host=(env "XDG_DATA_HOME=$root/data" "XDG_CACHE_HOME=$root/cache" "XDG_CONFIG_HOME=$root/config" "$@")
    "${host[@]}" python3 -m buildmgr key trust "$key" >/dev/null 2>&1
    "${host[@]}" python3 -m buildmgr install --from "$repo" --dry-run >"$out/install-$name.table.txt" 2>&1
    start=$(date +%s.%N)
    "${host[@]}" python3 -m buildmgr install --from "$repo" --json >"$out/install-$name.json" 2>"$out/install-$name.txt"
    echo "exit $? seconds $(python3 -c "import time; print(round(time.time() - $start, 2))")" >>"$out/install-$name.txt"
    log "installed $name"
}
log "install: the whole registry"
install_in all "$oci"
log "install: without the sm_90 archive"
python3 - <<'EOF'
import json
path = "/tmp/repo/index.json"
data = json.load(open(path))
data["artifacts"] = [a for a in data["artifacts"] if a["summary"]["arch"] != "sm90"]
json.dump(data, open(path, "w"), indent=2)
EOF
install_in no-sm90 /tmp/repo
log "install: CUDA hidden"
install_in cuda-hidden "$oci" CUDA_VISIBLE_DEVICES=
cp /tmp/repo/index.json "$out/index-no-sm90.json"
log "done"
echo "done" >"$out/finished"
