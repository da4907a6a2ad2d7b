"""The daily pipeline with every task in the runtime image: ``make run RUNNER=docker``.

kfp.local's DockerRunner runs the compiled tasks (the same commands a KFP backend runs) in
containers of the built image, as the image's user, with the storage root at the cluster's mount
path. The exit handler, the run records and the alias moves all happen inside the containers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from mlflow import MlflowClient

from components.common.tracking import sqlite_uri
from components.datagen import generate
from components.datagen.generator import extended
from pipelines.task_containers import IMAGE_UID, RUN_LABEL
from tests.run_records import SUMMARY_KEYS
from tests.small_run import local_run, small_world

pytestmark = pytest.mark.images
TINY = {"window_days": 4, "history_days": 1, "min_auc": 0.0, "global_batch": 512}


def in_containers(image: str, raw, root, run_id: str, **settings) -> list[str]:
    """``make run RUNNER=docker``'s command on ``raw``."""
    command = local_run(raw, root, run_id, **{**TINY, **settings})
    return [*command, "--runner", "docker", "--image", image]


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)


def summary(root, run_id: str) -> dict:
    return json.loads((root / "runs" / run_id / "summary.json").read_text())


def left_over(engine: str, run_id: str) -> list[str]:
    listed = subprocess.run(
        [engine, "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def test_daily_runs_in_the_runtime_image(images, tmp_path):
    engine, refs = images
    raw, root = small_world(tmp_path / "raw"), tmp_path / "store"

    # day 1: no champion -> blessed, registered, champion; every task in a container
    done = run(in_containers(refs["runtime"], raw, root, "day1"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"tasks in {refs['runtime']} ({engine})" in done.stdout
    first = summary(root, "day1")
    assert first["status"] == "SUCCEEDED" and set(first) >= SUMMARY_KEYS, first
    assert first["blessed"] and first["model_version"] == 1 == first["champion_version"]
    # the tasks wrote as the image's user, and saw the storage root at the cluster's mount path
    run_dir = root / "runs" / "day1"
    for written in ("plan.json", "train/best.pt", "registration.json", "stages/train.json"):
        assert (run_dir / written).stat().st_uid == IMAGE_UID, written
    parameters = json.loads((run_dir / "parameters.json").read_text())
    assert parameters["storage_root"] == "/mnt/dailyrec" and parameters["raw_uri"] == "/mnt/raw"
    assert "Failed to import Git" not in (run_dir / "logs" / "train-op.log").read_text()
    client = MlflowClient(sqlite_uri(root / "runs"), registry_uri=sqlite_uri(root / "runs"))
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}

    # day 2 meets the champion (loaded from the registry inside a container), a floor it
    # cannot reach: not blessed; register ran and moved nothing
    generate(extended(raw, 1))
    done = run(in_containers(refs["runtime"], raw, root, "day2", min_auc=0.99))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    second = summary(root, "day2")
    assert second["status"] == "SUCCEEDED" and second["blessed"] is False, second
    assert second["champion_version"] == 1 and second["stage_seconds"]["register"] is not None
    record = json.loads((root / "runs" / "day2" / "stages" / "train.json").read_text())
    assert record["warm_start"]["applied"] is True
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}
    assert json.loads((root / "runs" / "latest" / "summary.json").read_text())["run_id"] == "day2"

    # a failing task fails the run: the exit handler (in its container) records where
    empty = tmp_path / "empty"
    (empty / "dt=2026-01-01").mkdir(parents=True)
    done = run(in_containers(refs["runtime"], empty, root, "broken"))
    assert done.returncode == 1, done.stdout[-3000:]
    broken = summary(root, "broken")
    assert broken["status"] == "FAILED" and broken["failed_stage"] == "preprocess", broken
    assert broken["champion_version"] == 1  # the registry says who is champion
    assert "Traceback" not in done.stdout + done.stderr
    for run_id in ("day1", "day2", "broken"):
        assert left_over(engine, run_id) == [], run_id


def test_sigterm_stops_the_task_containers(images, tmp_path):
    engine, refs = images
    raw, root = small_world(tmp_path / "raw"), tmp_path / "store"
    command = in_containers(refs["runtime"], raw, root, "stopped", max_epochs=200)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # the console: stop once training runs in its container
            if " train " in line and "epoch 1/" in line:
                break
        assert left_over(engine, "stopped"), "no task container while training"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        seconds = time.monotonic() - started
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    # the containers are not the run's child processes: stopped and removed all the same
    assert left_over(engine, "stopped") == []
    assert seconds < 60
    stopped = summary(root, "stopped")
    assert stopped["status"] == "CANCELED" and "SIGTERM" in stopped["error"]
    assert "stopped by SIGTERM" in proc.stderr.read()
