"""Offline rendering of the kustomize manifests, shared by the deploy tests.

``render("a100")`` is what ``kubectl kustomize manifests/overlays/a100`` prints, as
dicts: no cluster needed. Import it as ``from tests.deploy.conftest import render``.
"""

from __future__ import annotations

import copy
import functools
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.tools import KUBECTL_HOW, require_tool, tool

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
KUBECTL = tool("kubectl")
TARGETS = ("base", "local", "a100")
"""Every kustomization the repo ships: the base and each overlay."""


def target_dir(overlay: str) -> Path:
    """``base``, an overlay's name (``local``, ``overlays/a100``) or any kustomization folder."""
    if overlay == "base":
        return MANIFESTS / "base"
    for candidate in (MANIFESTS / "overlays" / overlay, MANIFESTS / overlay, Path(overlay)):
        if (candidate / "kustomization.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"no kustomization for {overlay!r} under {MANIFESTS}")


@pytest.fixture
def kubectl() -> str:
    """kubectl's path: it renders the kustomize overlays (skips, or fails under CI, without it)."""
    return require_tool("kubectl", KUBECTL_HOW)


@functools.cache
def _build(folder: str) -> str:
    if KUBECTL is None:
        raise RuntimeError(
            f"kubectl is not installed: `kubectl kustomize` renders the manifests ({KUBECTL_HOW})"
        )
    done = subprocess.run(
        [KUBECTL, "kustomize", folder], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {folder} failed:\n{done.stderr}")
    return done.stdout


def render_text(overlay: str) -> str:
    """The rendered YAML stream, as kubectl prints it (cached per folder)."""
    return _build(str(target_dir(overlay)))


def render(overlay: str) -> list[dict]:
    """The rendered objects of ``base`` or an overlay; a fresh copy each call, safe to mutate."""
    return copy.deepcopy(_parsed(str(target_dir(overlay))))


@functools.cache
def _parsed(folder: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(_build(folder)) if doc]
