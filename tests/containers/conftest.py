"""The built images, and the engine that runs them (``make images``, then ``make test-images``)."""

from __future__ import annotations

import os
import subprocess

import pytest

from pipelines.containers import engine
from pipelines.task_containers import image_present

IMAGES_ENV = "DAILYREC_IMAGES"
"""``REGISTRY:TAG`` of the images under test (``make test-images`` sets it; default localhost:dev)."""


def refs() -> dict[str, str]:
    registry, _, tag = (os.environ.get(IMAGES_ENV) or "localhost:dev").rpartition(":")
    return {name: f"{registry}/dailyrec-{name}:{tag}" for name in ("runtime", "trainer")}


@pytest.fixture(scope="session")
def images() -> tuple[str, dict[str, str]]:
    """(engine, {"runtime": ref, "trainer": ref}); fails under CI when missing, skips otherwise."""
    found = engine()
    wanted = refs()
    problem = None
    if found is None:
        problem = "no container engine answers (install docker or podman)"
    else:
        missing = [ref for ref in wanted.values() if not image_present(found, ref)]
        if missing:
            problem = f"images not built: {', '.join(missing)} (make images)"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    return found, wanted


def run_in(
    engine_name: str, image: str, script: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``sh -c script`` in a fresh container of ``image`` as its own user, no network."""
    return subprocess.run(
        [engine_name, "run", "--rm", "--network", "none", image, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
