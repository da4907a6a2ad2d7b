"""Fault injection: killed ranks, killed preprocessing, damaged checkpoints, a dying tracking
server, an interrupted registration and an interrupted pipeline. Real processes, real signals."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.common.plan import TrainPlan, write_plan
from components.common.tracking import TrackingError, sqlite_uri
from components.common.train_summary import TrainSummary
from components.datagen import DatagenConfig, generate
from components.train.checkpoint import LAST, PREVIOUS, CheckpointError
from components.train.launch import LaunchSpec, LocalTorchrun
from components.train.trainer import TrainConfig, train
from tests.reliability.mlflow_server import mlflow_server as serve_mlflow
from tests.reliability.waiting import trainer_processes, wait_for
from tests.small_run import local_run, small_world

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
FAST = {"model": "debug", "num_workers": 0, "lr": 3e-3, "eval_batch": 4096, "patience": 0}


def plan_file(path: Path, **overrides) -> str:
    return str(write_plan(path, TrainPlan(**(FAST | overrides))))


def run_ok(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run to the end; on a non-zero exit, fail with the command's own last words."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, (
        f"exit {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return done


# ----------------------------------------------------------------------------- training


@pytest.mark.slow
def test_rank_killed_mid_epoch_resumes_and_finishes_like_an_uninterrupted_run(
    tiny_dataset, tmp_path, fault_report
):
    plan = plan_file(
        tmp_path / "plan.json",
        nproc_per_node=2,
        micro_batch=16,
        max_epochs=3,
        checkpoint_every_steps=20,
    )
    clean = LaunchSpec.of(
        data=str(tiny_dataset), out=str(tmp_path / "clean"), plan=plan, max_restarts=3
    )
    run_ok(LocalTorchrun().command(clean))
    faulty = LaunchSpec.of(
        data=str(tiny_dataset), out=str(tmp_path / "faulty"), plan=plan, max_restarts=3
    )
    log = tmp_path / "faulty.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            LocalTorchrun().command(faulty), stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_for(
            lambda: (tmp_path / "faulty" / LAST).exists(), 300, "the first mid-epoch checkpoint"
        )
        workers = trainer_processes(proc.pid)
        assert len(workers) == 2
        workers[1].send_signal(signal.SIGKILL)  # rank 1 dies mid-epoch 1, as on a preempted node
        assert proc.wait(timeout=600) == 0, log.read_text()[-4000:]
    finally:
        proc.kill()
    resumed, baseline = (
        TrainSummary.read(tmp_path / "faulty"),
        TrainSummary.read(tmp_path / "clean"),
    )
    assert resumed.resumed_from and resumed.epochs_run == 3
    assert [r["epoch"] for r in resumed.history] == [0, 1, 2]  # each epoch exactly once
    # rank 1's dropout masks come from rank 0's restored RNG after the restart: close, not identical
    assert resumed.best_val_auc == pytest.approx(baseline.best_val_auc, abs=0.02)
    fault_report(
        "training",
        "a training rank SIGKILLed mid-epoch (torchrun, 2 processes, restarts allowed)",
        f"restarted, resumed from the mid-epoch checkpoint, 3/3 epochs; best val AUC "
        f"{resumed.best_val_auc:.4f} vs {baseline.best_val_auc:.4f} uninterrupted",
    )


def test_damaged_checkpoint_falls_back_to_the_previous_one(tiny_dataset, tmp_path, fault_report):
    out = tmp_path / "out"
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(out),
        resume="auto",
        plan=plan_file(tmp_path / "p.json", micro_batch=512, max_epochs=2),
    )
    train(config)
    assert (out / PREVIOUS).exists()
    (out / LAST).write_bytes((out / LAST).read_bytes()[:1000])  # truncated after it was written
    summary = train(TrainConfig(**{**config.__dict__, "max_epochs": 3}))
    assert summary.resumed_from.endswith(PREVIOUS) and summary.epochs_run == 3
    for name in (LAST, PREVIOUS):
        (out / name).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"last\.pt.*last\.prev\.pt"):
        train(TrainConfig(**{**config.__dict__, "max_epochs": 4}))
    fault_report(
        "training",
        "last.pt truncated; then both last.pt and last.prev.pt corrupt",
        "resumes from last.prev.pt with a warning; with both damaged: CheckpointError naming both files",
    )


# ----------------------------------------------------------------------------- preprocessing


def _tree(folder: Path) -> dict[str, bytes]:
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "meta.json":
                meta = json.loads(data)
                for timing in ("seconds",):
                    meta.pop(timing, None)
                data = json.dumps(meta, sort_keys=True).encode()
            files[str(path.relative_to(folder))] = data
    return files


@pytest.mark.slow
def test_preprocessing_killed_while_writing_never_leaves_a_complete_looking_output(
    tmp_path, fault_report
):
    raw = tmp_path / "raw"
    generate(DatagenConfig(out=raw, days=6, users=3000, items=4000, events_per_day=40000, seed=3))
    command = [
        sys.executable,
        "-m",
        "components.preprocess",
        "--raw",
        str(raw),
        "--days",
        "4",
        "--history-days",
        "1",
        "--rows-per-partition",
        "20000",
    ]
    run_ok([*command, "--out", str(tmp_path / "clean")])
    out = tmp_path / "out"
    # kill it at successive points of its work: temp folder created, staging written, shards written
    moments = {
        "temp folder created": lambda t: True,
        "staged rows written": lambda t: (t / "_staging").exists(),
        "shards written": lambda t: any((t / "_shards").glob("*")),
    }
    for moment, reached in moments.items():
        proc = subprocess.Popen(
            [*command, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for(
                lambda reached=reached, proc=proc: (
                    next((t for t in tmp_path.glob("out.tmp-*") if reached(t)), None)
                    or proc.poll() is not None
                ),
                300,
                moment,
                poll=0.005,
            )
        finally:
            proc.kill()
            proc.wait()
        assert not (out / "meta.json").exists(), f"killed when {moment}: output looks complete"
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "removed leftover of an interrupted run" in done.stderr
    assert _tree(out) == _tree(tmp_path / "clean")
    assert not list(tmp_path.glob("out.tmp-*"))
    fault_report(
        "preprocess",
        "preprocessing SIGKILLed at 3 points while writing (temp folder, staging, shards)",
        "no output ever present until complete; the re-run removes the leftovers and is "
        "byte-identical to a clean run",
    )


# ----------------------------------------------------------------------------- tracking server


@pytest.fixture
def mlflow_server(tmp_path):
    """A real `mlflow server` on 127.0.0.1 over a SQLite store; yields (uri, db uri, process)."""
    db = tmp_path / "server" / "mlflow.db"
    db.parent.mkdir()
    store = sqlite_uri(db.parent)
    artifacts = tmp_path / "server" / "artifacts"
    with serve_mlflow(store, artifacts, [], {}, subprocess.DEVNULL, 90) as (uri, proc):
        yield uri, store, proc


@pytest.mark.slow
def test_tracking_server_dying_mid_training_and_before_registration(
    tiny_dataset, tmp_path, mlflow_server, fault_report
):
    from mlflow import MlflowClient

    from components.evaluate.stage import EvaluateConfig, evaluate
    from components.register.config import RegisterConfig
    from components.register.stage import register

    uri, store, server = mlflow_server
    plan = plan_file(tmp_path / "p.json", micro_batch=512, max_epochs=3)
    first = TrainConfig(
        data=str(tiny_dataset), out=str(tmp_path / "a"), plan=plan, tracking_uri=uri
    )
    train(first)
    evaluate(
        EvaluateConfig(
            data=str(tiny_dataset),
            checkpoint=str(tmp_path / "a" / "best.pt"),
            out=str(tmp_path / "ea"),
            tracking_uri=uri,
        )
    )
    register(
        RegisterConfig(
            checkpoint=str(tmp_path / "a" / "best.pt"),
            metrics=str(tmp_path / "ea" / "metrics.json"),
            decision=str(tmp_path / "ea" / "decision.json"),
            tracking_uri=uri,
        )
    )

    def kill_server_after_first_epoch(record):
        if record["epoch"] == 0:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

    second = TrainConfig(
        data=str(tiny_dataset), out=str(tmp_path / "b"), plan=plan, tracking_uri=uri
    )
    summary = train(second, on_epoch=kill_server_after_first_epoch)
    assert summary.epochs_run == 3 and summary.tracking_error  # training outlived the server
    started = time.monotonic()
    with pytest.raises(TrackingError, match=r"127\.0\.0\.1.*unusable after 3 attempts"):
        evaluate(
            EvaluateConfig(
                data=str(tiny_dataset),
                checkpoint=str(tmp_path / "b" / "best.pt"),
                out=str(tmp_path / "eb"),
                tracking_uri=uri,
            )
        )
    elapsed = time.monotonic() - started
    assert elapsed < 60 and not (tmp_path / "eb").exists()
    client = MlflowClient(store, registry_uri=store)  # the server's own store, read directly
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}
    assert len(client.search_model_versions("name = 'dailyrec'")) == 1
    fault_report(
        "tracking",
        "the real MLflow server killed after epoch 1 of training, then evaluation "
        "and registration attempted against it",
        f"training finished all epochs (tracking_error recorded); evaluate: 3 attempts with "
        f"backoff then TrackingError after {elapsed:.0f}s; champion untouched",
    )


# ----------------------------------------------------------------------------- registration


def test_registration_interrupted_between_logging_and_aliasing(
    tiny_dataset, tmp_path, monkeypatch, fault_report
):
    from mlflow import MlflowClient

    from components.evaluate.stage import EvaluateConfig, evaluate
    from components.register.config import RegisterConfig
    from components.register.stage import register

    train(
        TrainConfig(
            data=str(tiny_dataset),
            out=str(tmp_path / "t"),
            plan=plan_file(tmp_path / "p.json", micro_batch=512, max_epochs=1),
        )
    )
    uri = sqlite_uri(tmp_path / "reg")
    evaluate(
        EvaluateConfig(
            data=str(tiny_dataset),
            checkpoint=str(tmp_path / "t" / "best.pt"),
            out=str(tmp_path / "e"),
            tracking_uri=uri,
        )
    )
    config = RegisterConfig(
        checkpoint=str(tmp_path / "t" / "best.pt"),
        metrics=str(tmp_path / "e" / "metrics.json"),
        decision=str(tmp_path / "e" / "decision.json"),
        tracking_uri=uri,
    )
    for step in ("create_model_version", "set_registered_model_alias"):
        original = getattr(MlflowClient, step)

        def die(*args, step=step, **kwargs):
            raise KeyboardInterrupt(f"killed in {step}")

        monkeypatch.setattr(MlflowClient, step, die)
        with pytest.raises(KeyboardInterrupt, match=f"killed in {step}"):
            register(config)
        monkeypatch.setattr(MlflowClient, step, original)
    result = register(config)
    client = MlflowClient(uri, registry_uri=uri)
    assert result.version == 1 and len(client.search_model_versions("name = 'dailyrec'")) == 1
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}
    fault_report(
        "registry",
        "registration interrupted after logging the model, then after creating the "
        "version (before the alias)",
        "the re-run finds the logged model and the version by their "
        "key tag: exactly one version, champion alias set",
    )


# ----------------------------------------------------------------------------- the whole pipeline


@pytest.mark.slow
def test_interrupted_pipeline_rerun_completes_consistently(tmp_path, fault_report):
    from mlflow import MlflowClient

    raw = small_world(tmp_path / "raw")
    command = local_run(
        raw,
        tmp_path / "store",
        run_id="nightly",
        window_days=4,
        history_days=1,
        min_auc=0.0,
        max_epochs=3,
    )
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: (tmp_path / "store" / "runs" / "nightly" / "train" / LAST).exists(),
            600,
            "training to start writing checkpoints",
            poll=0.1,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the whole tree: runner, task, torchrun, ranks
        proc.wait()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "store" / "runs" / "nightly" / "summary.json").read_text())
    assert summary["status"] == "SUCCEEDED" and summary["model_version"] == 1
    store = sqlite_uri(tmp_path / "store" / "runs")
    client = MlflowClient(store, registry_uri=store)
    assert client.get_registered_model("dailyrec").aliases == {"champion": 1}
    assert len(client.search_model_versions("name = 'dailyrec'")) == 1
    fault_report(
        "pipeline",
        "the whole local pipeline SIGKILLed during training, then re-run with the same run id",
        "the re-run reuses the dataset, resumes training from the checkpoint, registers exactly one "
        "version as champion",
    )


# ----------------------------------------------------------------------------- evaluate's inputs


def test_evaluate_refuses_out_of_range_ids_and_non_finite_scores(
    tiny_dataset, tmp_path, fault_report
):
    import shutil

    import numpy as np
    import torch

    from components.evaluate.stage import EvaluateConfig, EvaluateError, evaluate
    from components.train.checkpoint import load_checkpoint

    train(
        TrainConfig(
            data=str(tiny_dataset),
            out=str(tmp_path / "t"),
            plan=plan_file(tmp_path / "p.json", micro_batch=512, max_epochs=1),
        )
    )
    best = tmp_path / "t" / "best.pt"
    # a damaged dataset: one test row's item id past the hash buckets
    damaged = tmp_path / "damaged"
    shutil.copytree(tiny_dataset, damaged)
    items = np.load(damaged / "test" / "target_item.npy", mmap_mode="r+")
    items[1234] = 10**6
    items.flush()
    with pytest.raises(
        EvaluateError, match=r"test rows 0\.\.2499: model input target_item: values"
    ) as bad_id:
        evaluate(EvaluateConfig(data=str(damaged), checkpoint=str(best), out=str(tmp_path / "e1")))
    # a diverged model: NaN weights score NaN, whose AUC would depend on row order
    state = load_checkpoint(best)
    state["model"] = {k: torch.full_like(v, float("nan")) for k, v in state["model"].items()}
    torch.save(state, tmp_path / "nan.pt")
    with pytest.raises(EvaluateError, match="NaN or infinite .*not evaluated") as nan:
        evaluate(
            EvaluateConfig(
                data=str(tiny_dataset),
                checkpoint=str(tmp_path / "nan.pt"),
                out=str(tmp_path / "e2"),
            )
        )
    assert not (tmp_path / "e1").exists() and not (tmp_path / "e2").exists()
    fault_report(
        "evaluate",
        "a test row whose item id lies past the hash buckets; a model whose weights are NaN",
        f"refused naming the rows and column ({str(bad_id.value)[-60:]}); "
        f"the NaN model is not evaluated ({str(nan.value)[-45:]})",
    )
