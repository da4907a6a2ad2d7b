"""Every command the deploy renders exists in the image it runs in.

The containers come from ``make deploy DRY_RUN=1``'s own files (the compiled pipeline's executors,
the rendered manifests, the example TrainJob and DaskCluster, the Katib experiment): nothing is
copied into this test. Each image's environment is its hash-locked requirements
(``images/*/requirements.lock``): the console scripts and top-level modules of exactly those
distributions (read from their installed metadata here), the project's own packages, the venv's
interpreter and the base image's shell tools. A command naming an executable or module the image
does not have (``dask-scheduler`` after distributed 2026.6) fails here, not on a cluster.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from pipelines.deploy import DeployConfig, deploy, rendered_containers
from tests.commands import DOCUMENTED_SCHEMES, commands_of

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {
    "dailyrec-runtime": ROOT / "images" / "runtime" / "requirements.lock",
    "dailyrec-trainer": ROOT / "images" / "trainer" / "requirements.lock",
}
BASE = {"sh", "bash", "env", "mktemp", "printf", "cat", "python", "python3"}
"""What every image has besides its lock: the Debian/Ubuntu base's shell and coreutils, and the
venv's interpreter (``/opt/venv/bin`` first on ``PATH``: images/*/Dockerfile)."""
PROJECT = {"components", "kube", "pipelines"}
"""Installed into both images from the repository (``pip install --no-deps .``)."""
needs_kubectl = pytest.mark.usefixtures("kubectl")


def lock_pins(lock: Path) -> dict[str, str]:
    """Canonical name -> version (or URL) of each requirement of a lock (images/lock.py reads it)."""
    from images.lock import entries

    return {name: version for name, (version, _) in entries(lock.read_text()).items()}


@functools.cache
def environment(lock: Path) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
    """(console scripts, top-level modules, pinned distributions not installed here to read)."""
    scripts, modules, unread = set(BASE), set(PROJECT), []
    for name in lock_pins(lock):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            unread.append(name)
            continue
        scripts |= {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}
        top = dist.read_text("top_level.txt")
        if top:
            modules |= set(top.split())
        for file in dist.files or []:
            first = file.parts[0]
            if first.endswith(".py"):
                modules.add(first[:-3])
            elif len(file.parts) > 1 and not first.endswith((".dist-info", ".data")):
                modules.add(first)
    return frozenset(scripts), frozenset(modules), tuple(unread)


def problems(container: dict) -> list[str]:
    image = container["image"].rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    scripts, modules, unread = environment(LOCKS[image])
    found = []
    for executable, module in commands_of(container["argv"]):
        name = Path(executable).name
        if name not in scripts:
            found.append(
                f"{container['where']}: {executable!r} is not in {image} "
                f"(no console script of its lock, not the base image's; unread: {', '.join(unread) or '-'})"
            )
        if module is not None:
            top = module.split(".")[0]
            if top not in modules:
                found.append(f"{container['where']}: module {module} is not in {image}'s lock")
            elif top in PROJECT and importlib.util.find_spec(module) is None:
                found.append(f"{container['where']}: module {module} does not exist")
    return found


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy")
    deploy(DeployConfig(env="a100", registry="reg.example/ml", tag="t", dry_run=True, out=str(out)))
    return rendered_containers(out)


@needs_kubectl
def test_every_rendered_command_exists_in_its_image(rendered):
    ours = [c for c in rendered if "/dailyrec-" in c["image"]]
    wheres = " ".join(c["where"] for c in ours)
    for kind in ("KFP task", "TrainingRuntime", "TrainJob example", "Katib trial", "DaskCluster"):
        assert kind in wheres, f"no {kind} container rendered"
    assert {c["image"].rsplit("/", 1)[1].split(":")[0] for c in ours} == set(LOCKS)
    found = [p for c in ours for p in problems(c)]
    assert not found, "\n".join(found)


def test_the_check_refuses_what_an_image_does_not_have():
    """Negative control: dask-kubernetes' own template, a module nobody ships, a missing wrapper."""
    runtime = "reg/dailyrec-runtime:t"
    assert problems({"where": "w", "image": runtime, "argv": ["dask-scheduler", "--host", "0"]})
    assert not problems({"where": "w", "image": runtime, "argv": ["dask", "scheduler"]})
    assert problems({"where": "w", "image": runtime, "argv": ["python", "-m", "components.nope"]})
    assert problems({"where": "w", "image": runtime, "argv": ["python", "-m", "notinstalled.x"]})
    script = ["sh", "-ec", 'x=$(mktemp -d)\n_V=1 python3 -m kfp.dsl.executor_main "$@"\n']
    assert not problems({"where": "w", "image": runtime, "argv": script})
    assert problems(
        {"where": "w", "image": runtime, "argv": ["sh", "-ec", "x=$(mktempx -d)\npython3 -V"]}
    )
    trainer = "reg/dailyrec-trainer:t"
    assert not problems(
        {"where": "w", "image": trainer, "argv": ["torchrun", "--module", "components.tune.trial"]}
    )


def test_the_documented_object_stores_resolve_in_both_images():
    """fsspec names the module of each scheme's filesystem; that module must be in the image."""
    from fsspec.registry import known_implementations

    docs = (ROOT / "docs" / "stages.md").read_text() + (ROOT / "docs" / "cluster.md").read_text()
    for scheme in DOCUMENTED_SCHEMES:
        assert f"{scheme}://" in docs, f"{scheme}:// is no longer documented: drop it here"
        module = known_implementations[scheme]["class"].split(".")[0]
        for image, lock in LOCKS.items():
            assert module.replace("_", "-") in lock_pins(lock), (
                f"{scheme}:// needs {module}, which {image}'s lock does not install"
            )
            _, modules, unread = environment(lock)
            assert module in modules or module.replace("_", "-") in unread, (image, module)
