"""A tiny world and the ``make run`` command on it, for tests that run the whole local pipeline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from components.datagen import DatagenConfig, generate


def small_world(raw: Path) -> Path:
    """Five days of synthetic logs at 2,500 events a day (400 users, 600 items): the smallest
    world the whole pipeline trains and evaluates on. Returns ``raw``."""
    generate(
        DatagenConfig(
            out=raw, days=5, users=400, items=600, categories=30, events_per_day=2500, seed=5
        )
    )
    return raw


def local_run(
    raw: Path,
    root: Path,
    run_id: str | None = None,
    config: str = "configs/debug.json",
    **settings: Any,
) -> list[str]:
    """The command line of ``make run`` (``python -m pipelines.local``) on ``raw``, storing under
    ``root``, with one ``--set name=value`` per setting."""
    command = [sys.executable, "-m", "pipelines.local", "--config", config]
    command += ["--data", str(raw), "--root", str(root)]
    if run_id is not None:
        command += ["--run-id", run_id]
    for name, value in settings.items():
        command += ["--set", f"{name}={value}"]
    return command
