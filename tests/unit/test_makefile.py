"""The Makefile as a user meets it: `make help` from a plain shell, and how `make install` picks
the torch build (scripts/install-torch.sh, run with DRY_RUN=1: it prints the pip command)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.tools import user_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-torch.sh"


def test_make_help_lists_every_target_and_every_variable_with_its_meaning():
    done = subprocess.run(
        ["make", "help"], cwd=ROOT, env=user_env(), capture_output=True, text=True, check=True
    )
    makefile = (ROOT / "Makefile").read_text()
    variables = re.findall(r"^([A-Z_]+) \?=", makefile, re.M)
    targets = re.findall(r"^([a-z-]+):.*## ", makefile, re.M)
    assert {"DATA", "CONFIG", "ROOT", "SERVE_PORT", "TORCH"} <= set(variables)
    for name in variables:
        line = re.search(rf"^  {name} +(.+)$", done.stdout, re.M)
        assert line, f"make help does not list {name}"
        # a meaning, then the default as make would use it
        assert re.fullmatch(r"\S.* \(default: .+\)", line[1]), line[1]
    assert "(default: data/raw)" in done.stdout  # DATA's default spelled out, not $(SAMPLE)
    for target in targets:
        assert re.search(rf"^  make {target} ", done.stdout, re.M), target


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A venv without torch, pip from the interpreter's own bundle (the script's first step on a
    fresh machine)."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return venv / "bin" / "python"


def cpu_wheel(folder: Path, version: str) -> None:
    """A wheel file named as PyTorch's CPU build (metadata only: it is never installed)."""
    name = f"torch-{version}+cpu"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    with zipfile.ZipFile(folder / f"{name}-{tag}-{tag}-manylinux_2_28_x86_64.whl", "w") as w:
        w.writestr(
            f"{name}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: torch\nVersion: {version}+cpu\n",
        )
        w.writestr(f"{name}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        w.writestr(f"{name}.dist-info/RECORD", "")


def pick(python: Path, tmp_path: Path, *, gpu: bool, local_wheel: bool, want: str = "auto"):
    links = tmp_path / "links"
    links.mkdir(exist_ok=True)
    if local_wheel:
        cpu_wheel(links, "2.13.0")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu:  # what nvidia-smi -L prints on a GPU machine
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100 (UUID: GPU-0)'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = user_env(
        PATH=f"{bin_dir}:/usr/bin:/bin",
        DRY_RUN="1",
        PIP_CONFIG_FILE="/dev/null",  # only what this test configures
        PIP_FIND_LINKS=str(links),
        PIP_NO_INDEX="1" if local_wheel else "",
    )
    done = subprocess.run(
        [str(SCRIPT), str(python), "2.13.0", want], env=env, capture_output=True, text=True
    )
    return done


def test_a_machine_without_gpu_gets_the_cpu_build_from_the_pytorch_index(bare_python, tmp_path):
    done = pick(bare_python, tmp_path, gpu=False, local_wheel=False)
    assert done.returncode == 0, done.stderr
    said, command = done.stdout.strip().splitlines()
    assert "CPU build" in said and "download.pytorch.org/whl/cpu" in said
    assert command.endswith(
        "--extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu"
    )


def test_local_wheels_that_hold_the_cpu_build_are_used(bare_python, tmp_path):
    done = pick(bare_python, tmp_path, gpu=False, local_wheel=True)
    assert done.returncode == 0, done.stderr
    said, command = done.stdout.strip().splitlines()
    assert "from pip's configured wheels" in said
    assert command.endswith("pip install --quiet torch==2.13.0+cpu")


def test_a_gpu_machine_or_torch_cuda_gets_pypis_cuda_build(bare_python, tmp_path):
    for done in (
        pick(bare_python, tmp_path, gpu=True, local_wheel=True),
        pick(bare_python, tmp_path / "..", gpu=False, local_wheel=False, want="cuda"),
    ):
        said, command = done.stdout.strip().splitlines()
        assert "CUDA build" in said and command.endswith(
            "pip install --progress-bar on torch==2.13.0"
        )
    wrong = pick(bare_python, tmp_path, gpu=False, local_wheel=False, want="rocm")
    assert wrong.returncode == 2 and "TORCH=rocm: choose auto, cpu or cuda" in wrong.stderr


def test_an_installed_torch_of_the_pinned_version_is_kept():
    done = subprocess.run(
        [str(SCRIPT), sys.executable, "2.13.0"],
        capture_output=True,
        text=True,
        env=user_env(DRY_RUN="1"),
    )
    assert done.returncode == 0 and done.stdout == ""
