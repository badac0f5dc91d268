#!/usr/bin/env bash
# Wait for a background GPU job writing into DIR until DIR/finished exists or SECONDS pass, copying DIR (as one
# .tgz) to DEST every minute and at the end, so that a call cut short at its limit still brings back
# what was there.
set -uo pipefail
dir=${1:?usage: gpu-poll.sh DIR SECONDS DEST}
seconds=${2:?usage: gpu-poll.sh DIR SECONDS DEST}
dest=${3:?usage: gpu-poll.sh DIR SECONDS DEST}
copy() {  # one archive: a call brings back only a few files
    mkdir -p "$dest"
    tar czf "$dest/$(basename "$dir").tgz.part" -C "$(dirname "$dir")" "$(basename "$dir")" 2>/dev/null
    mv "$dest/$(basename "$dir").tgz.part" "$dest/$(basename "$dir").tgz"
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
