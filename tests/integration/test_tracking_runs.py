"""MLflow runs end with the status of what happened: a crashed training run is FAILED, not
FINISHED; a stage told to stop (SIGTERM) ends its run KILLED, not RUNNING forever."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys

import pytest
from mlflow import MlflowClient

from components.common.plan import TrainPlan, write_plan
from components.common.proctree import Stopped
from components.common.stop import started_run
from components.common.tracking import sqlite_uri
from components.train import trainer
from components.train.trainer import TrainConfig, train
from tests.tools import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "crash, status",
    [(RuntimeError("validation died"), "FAILED"), (KeyboardInterrupt("stopped"), "KILLED")],
)
def test_a_crashed_training_run_is_closed_with_its_failure(
    tiny_dataset, tmp_path, monkeypatch, crash, status
):
    def broken(*args, **kwargs):
        raise crash

    monkeypatch.setattr(trainer, "evaluate", broken)  # the first validation, after an epoch's steps
    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(model="debug", micro_batch=512, num_workers=0, max_epochs=1),
    )
    uri = sqlite_uri(tmp_path / "mlruns")
    with pytest.raises(type(crash), match=str(crash.args[0])):
        train(
            TrainConfig(
                data=str(tiny_dataset), out=str(tmp_path / "out"), plan=str(plan), tracking_uri=uri
            )
        )
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("dailyrec-train").experiment_id])
    assert run.info.status == status and run.info.end_time
    import mlflow

    assert mlflow.active_run() is None  # the next run in this process starts clean


@pytest.mark.parametrize(
    "ending, status",
    [(None, "FINISHED"), (ValueError("bad"), "FAILED"), (Stopped(signal.SIGTERM), "KILLED")],
)
def test_a_stage_run_ends_with_how_its_work_ended(tmp_path, ending, status):
    import mlflow

    uri = sqlite_uri(tmp_path)
    mlflow.set_tracking_uri(uri)
    try:
        raises = pytest.raises(type(ending)) if ending else contextlib.nullcontext()
        with raises, started_run(run_name="stage") as run:
            if ending:
                raise ending
    finally:
        mlflow.set_tracking_uri(None)
    assert MlflowClient(uri).get_run(run.info.run_id).info.status == status
    assert mlflow.active_run() is None


STAGE = """
import sys, time
import mlflow
from components.common.stop import run_main, started_run

def main():
    mlflow.set_tracking_uri(sys.argv[1])
    with started_run(run_name="stage"):
        print("started", flush=True)
        time.sleep(120)
    return 0

sys.exit(run_main("stage", main))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stage_told_to_stop_ends_its_mlflow_run_killed(tmp_path, signum):
    """A pod's SIGTERM or a Ctrl-C to a stage CLI (evaluate and register run this way): one
    line, the shell's status 128+N, and the run KILLED, not RUNNING forever."""
    uri = sqlite_uri(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", STAGE, uri],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "started", proc.communicate()[1][-2000:]
    proc.send_signal(signum)
    assert proc.wait(timeout=60) == 128 + signum
    stderr = proc.stderr.read()
    assert f"stage: stopped by {signal.Signals(signum).name}" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("Default").experiment_id])
    assert run.info.status == "KILLED" and run.info.end_time


def test_the_stage_clis_that_record_runs_end_them_when_stopped():
    """train, evaluate and register run their CLI through run_main (the test above shows what it
    does; the next one, on the trainer itself)."""
    for stage in ("train", "evaluate", "register"):
        source = (ROOT / "components" / stage / "__main__.py").read_text()
        assert f'sys.exit(run_main("{stage}", main))' in source, stage


def test_sigterm_to_training_ends_its_mlflow_run_killed(tiny_dataset, tmp_path):
    """A pod's SIGTERM, or torchrun stopping its ranks, deep in training (its data loader's
    worker too): one line, status 143, the run KILLED."""
    import time

    plan = write_plan(
        tmp_path / "plan.json",
        TrainPlan(model="debug", micro_batch=64, num_workers=1, max_epochs=500),
    )
    uri = sqlite_uri(tmp_path / "mlruns")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "components.train",
            "--data",
            str(tiny_dataset),
            "--plan",
            str(plan),
            "--out",
            str(tmp_path / "out"),
            "--tracking-uri",
            uri,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = MlflowClient(uri)
        deadline, experiment = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            if (tmp_path / "mlruns" / "mlflow.db").exists():
                experiment = client.get_experiment_by_name("dailyrec-train")
                runs = experiment and client.search_runs([experiment.experiment_id])
                if runs and runs[0].data.metrics:  # an epoch done: deep in training
                    break
            time.sleep(0.5)
        else:
            proc.kill()
            pytest.fail(f"training logged no epoch: {proc.communicate()[1][-2000:]}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        stderr = proc.stderr.read()
        assert "train: stopped by SIGTERM" in stderr and "Traceback" not in stderr, stderr
        (run,) = client.search_runs([experiment.experiment_id])
    finally:  # a stop it lost would leave it ignoring SIGTERM: it must not outlive the test
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert run.info.status == "KILLED" and run.info.end_time
