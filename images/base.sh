#!/usr/bin/env bash
# Build the images' base from Debian's packages, for a machine that reaches no image registry:
#   images/base.sh ENGINE [NAME]      (default NAME: localhost/dailyrec-base:bookworm)
# debootstrap's minbase of Debian 12 (bookworm) plus python3 (3.11, the interpreter
# images/runtime/requirements.lock is resolved for), python3-venv, python-is-python3 and
# ca-certificates, imported as one layer. Kept when NAME exists already (REBUILD_BASE=1 redoes it).
set -euo pipefail

engine=${1:?usage: images/base.sh ENGINE [NAME]}
name=${2:-localhost/dailyrec-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [[ -z ${REBUILD_BASE:-} ]] && "$engine" image inspect "$name" >/dev/null 2>&1; then
    echo "base $name exists (REBUILD_BASE=1 rebuilds it)" >&2
    exit 0
fi
command -v debootstrap >/dev/null 2>&1 || {
    echo "images/base.sh: debootstrap is needed to build a base from Debian's packages (apt-get install debootstrap)" >&2
    exit 3
}
[[ $(id -u) == 0 ]] || { echo "images/base.sh: debootstrap needs root" >&2; exit 3; }
rootfs=$(mktemp -d "${TMPDIR:-/tmp}/dailyrec-base.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT
echo "building base $name from Debian's packages ($mirror, bookworm)" >&2
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$rootfs" "$mirror" >&2
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | "$engine" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sh"]' - "$name" >/dev/null
echo "base $name built" >&2
