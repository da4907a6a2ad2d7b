#!/usr/bin/env bash
# Install the pinned torch into a venv, the build that fits this machine, saying what and from where.
#
#   scripts/install-torch.sh VENV_PYTHON VERSION [auto|cpu|cuda]
#
# PyPI's torch wheel for Linux is the CUDA build: it pulls cuda-toolkit, cuDNN, NCCL and triton
# (several GB). On a machine without an NVIDIA GPU (auto) or with TORCH=cpu, the CPU build comes
# from pip's own configured sources when they hold it (a local wheel folder), else from the
# PyTorch CPU index (TORCH_CPU_INDEX). TORCH=cuda, or a GPU that nvidia-smi lists, takes PyPI's.
# DRY_RUN=1 prints the pip command instead of running it.
set -euo pipefail
py=${1:?usage: install-torch.sh VENV_PYTHON VERSION [auto|cpu|cuda]}
version=${2:?usage: install-torch.sh VENV_PYTHON VERSION [auto|cpu|cuda]}
want=${3:-auto}
index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

case "$want" in auto | cpu | cuda) ;; *) echo "TORCH=$want: choose auto, cpu or cuda" >&2; exit 2 ;; esac
if "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
    exit 0 # already there (whichever build the user chose before)
fi
if [ "$want" = auto ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
        want=cuda
    else
        want=cpu
    fi
fi

run() {
    if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi
}

if [ "$want" = cuda ]; then
    echo "installing torch $version, the CUDA build, from PyPI (with its CUDA libraries: several GB, many minutes)"
    run "$py" -m pip install --progress-bar on "torch==$version"
    exit 0
fi
# a CPU wheel among pip's configured sources (find-links, an index mirror)? Only its name is read.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
"$py" -m pip download --quiet --no-deps --only-binary :all: --dest "$probe" "torch==$version" \
    --no-index >/dev/null 2>&1 || true
if ls "$probe"/torch-"$version"+cpu-*.whl >/dev/null 2>&1; then
    echo "installing torch $version, the CPU build, from pip's configured wheels"
    run "$py" -m pip install --quiet "torch==$version+cpu"
else
    echo "installing torch $version, the CPU build (about 200 MB), from $index (TORCH=cuda for the CUDA build)"
    # +cpu exists only on that index; torch's own dependencies still come from PyPI
    run "$py" -m pip install --progress-bar on --extra-index-url "$index" "torch==$version+cpu"
fi
