#!/bin/sh
# local_wheels.sh DIR LOCK: point the lock's `name @ https://...` lines at the same files in DIR
# when DIR holds them (a build whose network cannot reach that index). pip still checks each
# file against the lock's hash, so only the very file the lock was resolved with installs.
set -eu
dir=$1
lock=$2
for wheel in "$dir"/*.whl; do
    [ -e "$wheel" ] || continue
    file=${wheel##*/}
    encoded=$(printf '%s' "$file" | sed 's/+/%2B/g')
    sed -i "s#^\([A-Za-z0-9_.-]*\) @ https://[^ ]*/$encoded #\1 @ file://$wheel #" "$lock"
done
