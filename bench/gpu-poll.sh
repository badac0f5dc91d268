#!/usr/bin/env bash
# Wait for a background GPU job writing into DIR until DIR/finished exists or SECONDS pass, copying DIR (its large
# logs compressed) to DEST every minute and at the end, so that a call cut short at its limit still brings back
# what was there.
set -uo pipefail
dir=${1:?usage: gpu-poll.sh DIR SECONDS DEST}
seconds=${2:?usage: gpu-poll.sh DIR SECONDS DEST}
dest=${3:?usage: gpu-poll.sh DIR SECONDS DEST}
copy() {
    mkdir -p "$dest"
    cp -r "$dir" "$dest/" 2>/dev/null
    find "$dest" -name '*.log' -size +1M -exec gzip -f {} + 2>/dev/null
}
end=$(( $(date +%s) + seconds ))
next=$(( $(date +%s) + 60 ))
while [ ! -e "$dir/finished" ] && [ "$(date +%s)" -lt "$end" ]; do
    sleep 5
    if [ "$(date +%s)" -ge "$next" ]; then copy; next=$(( $(date +%s) + 60 )); fi
done
copy
find "$dir" -name progress.txt -exec tail -n 3 {} \;
[ -e "$dir/finished" ] && echo FINISHED || echo "still running"
