"""The local container engine: docker or podman, whichever answers (a docker CLI without a daemon
is common, so being on PATH proves nothing). Used by ``make images``' checks, the images
benchmark and ``make run RUNNER=docker``.

Podman on machines whose defaults it cannot run with takes ``images/containers.conf`` through
``CONTAINERS_CONF`` (runtime runc, ulimits the machine allows).
"""

from __future__ import annotations

import os
import shutil
import subprocess

ENGINES = ("docker", "podman")
ENGINE_ENV = "CONTAINER_ENGINE"


def engine(environ: dict[str, str] | None = None) -> str | None:
    """The first of ``$CONTAINER_ENGINE`` (alone, when set) or docker, podman whose ``info``
    succeeds; None when none does."""
    env = os.environ if environ is None else environ
    forced = env.get(ENGINE_ENV)
    for candidate in [forced] if forced else ENGINES:
        if not shutil.which(candidate):
            continue
        try:
            answered = (
                subprocess.run(
                    [candidate, "info"], capture_output=True, check=False, timeout=60
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            answered = False
        if answered:
            return candidate
    return None
