#!/usr/bin/env bash
# Build the two dailyrec images (and push them with --push):
#   images/build.sh REGISTRY TAG [--push]
# -> REGISTRY/dailyrec-runtime:TAG and REGISTRY/dailyrec-trainer:TAG, printed on stdout; with
#    --push each as REGISTRY/NAME@sha256:DIGEST, the digest the registry reported for the push
#    (what make deploy pins everywhere: a tag can be moved, a digest cannot).
# Run from anywhere: the build context is the repository root, filtered by its .dockerignore.
#
# Environment (all optional):
#   CONTAINER_ENGINE   docker | podman (default: the first whose `info` answers)
#   BASE               registry | debian (default: registry when its base can be pulled, else a
#                      base built from Debian's packages by images/base.sh, with the CPU trainer)
#   TRAINER            cuda | cpu: the trainer's variant on registry bases (default cuda)
#   BASE_IMAGE_RUNTIME, BASE_IMAGE_TRAINER   replace a Dockerfile's base (e.g. NAME@sha256:...);
#                      the base used is recorded in the org.opencontainers.image.base.name label
#   WHEELS=DIR         local wheels for an index the network cannot reach (images/local_wheels.sh)
#   CA_BUNDLE=FILE     the CA of a TLS-inspecting network (a build secret, in no layer)
#   NETWORK=host       the build's network; PLATFORM=linux/amd64 builds for another architecture
#   NO_CACHE=1         build every layer again
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

# The engine that answers, not the one on PATH (a docker CLI without a daemon is common).
engine=${CONTAINER_ENGINE:-}
if [[ -z $engine ]]; then
    for candidate in docker podman; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" info >/dev/null 2>&1; then
            engine=$candidate
            break
        fi
    done
fi
if [[ -z $engine ]] || ! command -v "$engine" >/dev/null 2>&1; then
    echo "images/build.sh: no container engine answers: install docker or podman (or set CONTAINER_ENGINE)" >&2
    exit 3
fi

platform_args=()
if [[ -n ${PLATFORM:-} ]]; then
    platform_args=(--platform "$PLATFORM")
fi
extra_args=()
# local wheels for indexes the build's network cannot reach (images/local_wheels.sh)
[[ -n ${WHEELS:-} ]] && extra_args+=(--build-context "wheels=$WHEELS")
# a TLS-inspecting network's CA, for the downloads only (a build secret, in no layer)
[[ -n ${CA_BUNDLE:-} ]] && extra_args+=(--secret "id=ca-bundle,src=$CA_BUNDLE")
[[ -n ${NETWORK:-} ]] && extra_args+=(--network "$NETWORK")
[[ -n ${NO_CACHE:-} ]] && extra_args+=(--no-cache)  # a cold build (what benchmarks/images.py times)

dockerfile_base() {  # the Dockerfile's default base (builtins only: no external command here)
    local line
    while IFS= read -r line; do
        if [[ $line == "ARG BASE_IMAGE="* ]]; then
            printf '%s' "${line#ARG BASE_IMAGE=}"
            return
        fi
    done <"$1"
}

# BASE=registry: the Dockerfiles' bases (the production ones); BASE=debian: one built from Debian's
# packages (images/base.sh), for a machine that reaches no registry -- then the trainer is its CPU
# variant (no CUDA base). Default: the registry's when the engine has or can pull it.
base_mode=${BASE:-}
if [[ -z $base_mode ]]; then
    base_mode=registry
    runtime_base=$(dockerfile_base "$root/images/runtime/Dockerfile")
    if ! "$engine" image inspect "$runtime_base" >/dev/null 2>&1 \
        && ! "$engine" pull "$runtime_base" >/dev/null 2>&1; then
        base_mode=debian
    fi
fi
trainer=${TRAINER:-cuda}
if [[ $base_mode == debian ]]; then
    "$BASH" "$root/images/base.sh" "$engine"
    trainer=cpu
    echo "base: built from Debian's packages (no registry answered); trainer: CPU variant" >&2
else
    echo "base: the Dockerfiles' (registry); trainer: $trainer" >&2
fi

refs=()
for image in runtime trainer; do
    ref="$registry/dailyrec-$image:$tag"
    dockerfile="$root/images/$image/Dockerfile"
    override_var="BASE_IMAGE_${image^^}"
    base=${!override_var:-}
    image_args=()
    if [[ -z $base && $base_mode == debian ]]; then
        base=localhost/dailyrec-base:bookworm
    elif [[ -z $base ]]; then
        base=$(dockerfile_base "$dockerfile")
    fi
    if [[ $image == trainer && $trainer == cpu ]]; then
        # the same Dockerfile, the runtime's lock (CPython 3.11, torch's CPU build)
        image_args+=(--build-arg "LOCK=images/runtime/requirements.lock")
    fi
    [[ $base == *@sha256:* || $base == localhost/* ]] || echo "note: $image base $base is pinned by tag only (set $override_var=NAME@sha256:... to pin its digest)" >&2
    echo "building $ref from $base with $engine" >&2
    replaced=$("$engine" image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)
    started=$SECONDS
    # The +"..." form keeps an empty array legal under set -u in bash 3.2 (macOS).
    "$engine" build ${platform_args[@]+"${platform_args[@]}"} ${extra_args[@]+"${extra_args[@]}"} \
        ${image_args[@]+"${image_args[@]}"} \
        --file "$dockerfile" \
        --build-arg "BASE_IMAGE=$base" \
        --label "org.opencontainers.image.version=$tag" \
        --label "org.opencontainers.image.base.name=$base" \
        --label "io.dailyrec.variant=$([[ $image == trainer ]] && echo "$trainer" || echo cpu)" \
        --tag "$ref" \
        "$root" >&2  # the build's own output is for people; stdout carries the references
    echo "built $ref in $((SECONDS - started))s" >&2
    # the image the tag named before: untagged now, a few GB a rebuild until the disk is full;
    # one still tagged elsewhere or used by a container stays (rm refuses it)
    if [[ -n $replaced && $replaced != $("$engine" image inspect --format '{{.Id}}' "$ref") ]]; then
        "$engine" image rm "$replaced" >/dev/null 2>&1 && echo "removed the replaced ${replaced:0:12}" >&2 || true
    fi
    refs+=("$ref")
done

if [[ $push -eq 1 ]]; then
    pinned=()
    for ref in "${refs[@]}"; do
        if [[ $engine == podman ]]; then
            # the digest file is this substitution's stdout; the progress goes to stderr
            reported=$("$engine" push --digestfile /dev/stdout "$ref")
        else
            "$engine" push "$ref" >&2
            # the repository digests of what was just pushed
            reported=$("$engine" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$ref")
        fi
        digest=""
        while IFS= read -r line; do
            [[ $line == "${ref%:*}@"* ]] && line=${line#*@}
            [[ $line =~ ^(sha256:[0-9a-f]{64})$ ]] && digest=${BASH_REMATCH[1]}
        done <<<"$reported"
        [[ -n $digest ]] || { echo "images/build.sh: $ref pushed, but no digest reported" >&2; exit 1; }
        pinned+=("${ref%:*}@$digest")
    done
    refs=("${pinned[@]}")
fi

printf '%s\n' "${refs[@]}"
