#!/usr/bin/env bash
# Build the two dailyrec images (and push them with --push):
#   images/build.sh REGISTRY TAG [--push]
# -> REGISTRY/dailyrec-runtime:TAG and REGISTRY/dailyrec-trainer:TAG, printed on stdout.
# Uses docker, else podman (CONTAINER_ENGINE=podman forces one); PLATFORM=linux/amd64
# builds for the cluster's architecture from another machine. BASE_IMAGE_RUNTIME /
# BASE_IMAGE_TRAINER replace a Dockerfile's base (e.g. pinned by digest: name@sha256:...); the
# base used is recorded in the image's org.opencontainers.image.base.name label. Run from anywhere: the build
# context is the repository root, filtered by its .dockerignore.
set -euo pipefail

usage() {
    echo "usage: images/build.sh REGISTRY TAG [--push]" >&2
    exit 2
}

[[ $# -eq 2 || $# -eq 3 ]] || usage
registry=${1%/}
tag=$2
push=0
if [[ $# -eq 3 ]]; then
    [[ $3 == --push ]] || usage
    push=1
fi
[[ -n $registry ]] || usage
# Docker's tag grammar: reject early rather than after a long build.
if [[ ! $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
    echo "images/build.sh: invalid tag '$tag' (letters, digits, _ . -; at most 128)" >&2
    exit 2
fi

# ${BASH_SOURCE%/*} rather than dirname: no external command needed before the engine check.
here=${BASH_SOURCE[0]%/*}
[[ $here == "${BASH_SOURCE[0]}" ]] && here=.
root=$(cd "$here/.." && pwd)

engine=${CONTAINER_ENGINE:-}
if [[ -z $engine ]]; then
    if command -v docker >/dev/null 2>&1; then
        engine=docker
    elif command -v podman >/dev/null 2>&1; then
        engine=podman
    fi
fi
if [[ -z $engine ]] || ! command -v "$engine" >/dev/null 2>&1; then
    echo "images/build.sh: no container engine: install docker or podman (or set CONTAINER_ENGINE)" >&2
    exit 3
fi

platform_args=()
if [[ -n ${PLATFORM:-} ]]; then
    platform_args=(--platform "$PLATFORM")
fi

refs=()
for image in runtime trainer; do
    ref="$registry/dailyrec-$image:$tag"
    dockerfile="$root/images/$image/Dockerfile"
    override_var="BASE_IMAGE_${image^^}"
    base=${!override_var:-}
    if [[ -z $base ]]; then  # the Dockerfile's default (builtins only: no external command here)
        while IFS= read -r line; do
            if [[ $line == "ARG BASE_IMAGE="* ]]; then
                base=${line#ARG BASE_IMAGE=}
                break
            fi
        done <"$dockerfile"
    fi
    [[ $base == *@sha256:* ]] || echo "note: $image base $base is pinned by tag only (set $override_var=NAME@sha256:... to pin its digest)" >&2
    echo "building $ref from $base with $engine" >&2
    # The +"..." form keeps an empty array legal under set -u in bash 3.2 (macOS).
    "$engine" build ${platform_args[@]+"${platform_args[@]}"} \
        --file "$dockerfile" \
        --build-arg "BASE_IMAGE=$base" \
        --label "org.opencontainers.image.version=$tag" \
        --label "org.opencontainers.image.base.name=$base" \
        --tag "$ref" \
        "$root"
    refs+=("$ref")
done

if [[ $push -eq 1 ]]; then
    for ref in "${refs[@]}"; do
        "$engine" push "$ref"
    done
fi

printf '%s\n' "${refs[@]}"
