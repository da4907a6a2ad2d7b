"""Shared fixtures: tiny raw-event folders written in the raw contract."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from components.common import schema

pytest_plugins = ["tests.serving_world"]  # its fixtures (world, registered) for every module

START = dt.date(2026, 3, 1)
MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")

# Tools the test extras install next to the interpreter (kubectl, hadolint) are found by the
# code under test too, as in an activated venv: `make test` runs .venv/bin/python directly.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")


_SESSION_MLFLOW_ENV = {key: os.environ.get(key) for key in MLFLOW_ENV}


@pytest.fixture(autouse=True)
def _isolated_mlflow_env():
    """mlflow.set_tracking_uri exports $MLFLOW_TRACKING_URI: keep one test's URI out of the next.
    Restored to the session's own values, so a module fixture's URI (set up before this runs)
    does not outlive its module either."""
    yield
    for key, value in _SESSION_MLFLOW_ENV.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def random_events(
    rng: np.random.Generator,
    day: dt.date,
    n: int,
    users: int = 40,
    items: int = 200,
    click_rate: float = 0.3,
) -> pd.DataFrame:
    """n events of one day with integer ids; clicks common enough to fill histories."""
    start = schema.day_start_epoch(day)
    item = rng.integers(0, items, n)
    return pd.DataFrame(
        {
            "user_id": rng.integers(0, users, n),
            "item_id": item,
            "category_id": item % 17,
            # few distinct seconds, so same-second ties are exercised
            "timestamp": start + rng.integers(0, 200, n) * 432,
            "label": (rng.random(n) < click_rate).astype(np.int8),
        }
    )


def call_exit_handler(func, root, state="FAILED", message="", **arguments):
    """The exit handler's body ``func`` (``finalize.python_func``) called as KFP calls it on
    storage root ``root``, the run's final ``state`` and ``message`` given; ``arguments``
    replace the defaults of its other parameters."""
    from kfp import dsl

    status = dsl.PipelineTaskFinalStatus(
        state=state,
        pipeline_job_resource_name="run-1",
        pipeline_task_name="exit-handler-1",
        error_code=None,
        error_message=message,
    )
    defaults = dict(
        storage_root=str(root),
        run_id="r1",
        kfp_run_id="kfp-1",
        model_name="m",
        tracking_uri="",
        launcher="local",
        cluster_target="",
        retention_days=0,
    )
    return func(status=status, **(defaults | arguments))


def write_day(
    root: Path, day: dt.date, frame: pd.DataFrame, fmt: str = "parquet", name: str = "part-00000"
) -> Path:
    folder = root / schema.day_folder_name(day)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.{fmt}"
    if fmt == "parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return path


@pytest.fixture
def raw_days(tmp_path):
    """A factory: ``raw_days(days=6, rows=300, seed=0)`` -> (raw root, {day: frame})."""

    def make(days: int = 6, rows: int = 300, seed: int = 0, fmt: str = "parquet"):
        rng = np.random.default_rng(seed)
        root = tmp_path / f"raw-{seed}-{fmt}"
        frames = {}
        for i in range(days):
            day = START + dt.timedelta(days=i)
            frames[day] = random_events(rng, day, rows)
            write_day(root, day, frames[day], fmt)
        return root, frames

    return make


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """7,500 train / 2,500 val / 2,500 test rows, seq_len 8, small hash buckets (built once per session)."""
    from tests.integration.conftest import make_dataset

    return make_dataset(tmp_path_factory.mktemp("tiny"))
