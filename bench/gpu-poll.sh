#!/usr/bin/env bash
# Wait for a background GPU job writing into DIR until DIR/finished exists or SECONDS pass, then copy DIR (its logs
# compressed) to DEST, so that every call brings back what is there even if the machine goes back after it.
set -uo pipefail
dir=${1:?usage: gpu-poll.sh DIR SECONDS DEST}
seconds=${2:?usage: gpu-poll.sh DIR SECONDS DEST}
dest=${3:?usage: gpu-poll.sh DIR SECONDS DEST}
end=$(( $(date +%s) + seconds ))
while [ ! -e "$dir/finished" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
mkdir -p "$dest"
cp -r "$dir" "$dest/"
find "$dest" -name '*.log' -size +1M -exec gzip -f {} +
find "$dir" -name progress.txt -exec tail -n 3 {} \;
[ -e "$dir/finished" ] && echo FINISHED || echo "still running"
