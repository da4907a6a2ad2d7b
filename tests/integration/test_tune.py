"""The hyperparameter search on tiny data: pruning, the tuned file in the estimate and train
stages, resuming, the CLI, and the dailyrec-tune pipeline (compiled and through kfp.local)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from mlflow import MlflowClient

from components.common.cli import Exit
from components.common.tracking import sqlite_uri
from components.estimate.planner import EstimateConfig, EstimateError, estimate
from components.train.checkpoint import load_checkpoint
from components.train.model import ModelConfig, model_config
from components.train.trainer import TrainConfig, train
from components.train.tuned import tuned_training
from components.tune.__main__ import main as tune_cli
from components.tune.config import TuneConfig
from components.tune.space import SearchSpace
from components.tune.study import TuneError, open_study, tune
from components.tune.trial import PLAN_FILE, write_trial_plan
from components.tune.trial import main as trial_main
from kube.katib import METRIC_FILTER
from tests.small_run import small_world

pytestmark = pytest.mark.integration

SPACE = SearchSpace(d_model=(8, 16), layers=(1, 2))
GOOD = {
    "lr": 2e-3,
    "weight_decay": 1e-4,
    "warmup_fraction": 0.0,
    "dropout": 0.1,
    "d_model": 8,
    "layers": 1,
}
# the bottom of the lr range behind the longest warmup: barely trained after one epoch
BAD = {
    "lr": 3e-4,
    "weight_decay": 1e-6,
    "warmup_fraction": 0.15,
    "dropout": 0.0,
    "d_model": 16,
    "layers": 2,
}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_config(data, out, **changes) -> TuneConfig:
    fields = dict(
        data=str(data),
        out=str(out),
        base_model="debug",
        global_batch=256,
        max_epochs=3,
        trials=5,
        pruner="asha",
        reduction_factor=3,
        sampler="random",
        seed=0,
        space=SPACE,
        enqueue=(GOOD, BAD),
    )
    return TuneConfig(**(fields | changes))


@pytest.fixture(scope="module")
def search(tiny_dataset, tmp_path_factory):
    """One small search with MLflow tracking: (summary, output folder, tracking URI)."""
    out = tmp_path_factory.mktemp("search")
    uri = sqlite_uri(out / "mlruns")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield tune(small_config(tiny_dataset, out / "tune", tracking_uri=uri)), out / "tune", uri
    finally:
        torch.set_num_threads(threads)


def test_search_prunes_the_bad_config_and_writes_the_best(search):
    summary, out, _ = search
    rows = {r["trial"]: r for r in summary["trial_rows"]}
    assert summary["trials"] == 5 and summary["failed"] == 0
    assert rows[1]["params"] == BAD and rows[1]["state"] == "pruned" and rows[1]["epochs"] == 1
    assert summary["pruned"] >= 1 and summary["complete"] >= 1
    assert summary["epochs_spent"] < summary["epochs_if_unpruned"] == 5 * 3
    assert (
        rows[0]["state"] == "complete" and rows[0]["epochs"] == 3
    )  # the first trial is never pruned
    best = rows[summary["best_trial"]]
    assert best["state"] == "complete" and summary["best_val_auc"] == best["value"]
    assert summary["best_val_auc"] == max(
        r["value"] for r in rows.values() if r["state"] == "complete"
    )
    # the tuned file: the best trial's architecture and training settings, and the search summary
    doc = json.loads((out / "tuned.json").read_text())
    assert doc["format"] == "dailyrec.model-config/v1" and doc["name"] == "tuned"
    assert set(doc["train"]) == {"lr", "weight_decay", "warmup_fraction", "global_batch"}
    assert doc["search"]["trials"] == 5 and doc["search"]["best_val_auc"] == summary["best_val_auc"]
    assert (
        doc["search"]["pruned"] == summary["pruned"]
        and doc["search"]["epochs_spent"] == summary["epochs_spent"]
    )
    config = model_config(str(out / "tuned.json"))
    params = summary["best_params"]
    assert isinstance(config, ModelConfig) and config.name == "tuned"
    assert (config.d_model, config.layers, config.dropout) == (
        params["d_model"],
        params["layers"],
        params["dropout"],
    )
    assert config.ffn == 2 * config.d_model and config.mlp == (
        16,
    )  # the debug base's shape otherwise
    training = tuned_training(str(out / "tuned.json"))
    assert (
        training.lr,
        training.weight_decay,
        training.warmup_fraction,
        training.global_batch,
    ) == (params["lr"], params["weight_decay"], params["warmup_fraction"], 256)
    assert not list(out.glob("trials/*/train/*.pt"))  # trial checkpoints are not kept by default


def test_trials_are_tracked_in_mlflow(search):
    summary, _, uri = search
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("dailyrec-tune")
    runs = client.search_runs([experiment.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("dailyrec.kind") == "study")
    trials = {
        int(r.data.tags["dailyrec.trial"]): r
        for r in runs
        if r.data.tags.get("dailyrec.kind") == "trial"
    }
    assert len(trials) == 5 and parent.info.status == "FINISHED"
    assert parent.data.metrics["best_val_auc"] == summary["best_val_auc"]
    for number, row in ((r["trial"], r) for r in summary["trial_rows"]):
        run = trials[number]
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["state"] == row["state"] and run.data.params["lr"] == str(
            row["params"]["lr"]
        )
        curve = client.get_metric_history(run.info.run_id, "val_auc")
        assert [m.step for m in sorted(curve, key=lambda m: m.step)] == list(
            range(1, row["epochs"] + 1)
        )


def test_tuned_file_drives_estimate_and_training(search, tiny_dataset, tmp_path, caplog):
    _, out, _ = search
    tuned = str(out / "tuned.json")
    training = tuned_training(tuned)
    doc = estimate(
        EstimateConfig(
            data=str(tiny_dataset), model=tuned, global_batch=1024, max_epochs=1, probe=False
        )
    )
    plan = doc["train"]
    assert plan.model == tuned
    assert plan.lr == pytest.approx(
        training.lr * 1024 / training.global_batch
    )  # linear scaling from 256
    assert (
        plan.weight_decay == training.weight_decay
        and plan.warmup_fraction == training.warmup_fraction
    )
    assert "tuned settings" in doc["rationale"]["lr"]
    # a plan with model=<tuned file> trains; the checkpoint records the tuned architecture
    plan_file, _ = write_trial_plan(
        tmp_path / "plan.json",
        data=str(tiny_dataset),
        model_file=tuned,
        hardware="cpu-local",
        global_batch=1024,
        max_epochs=1,
        nproc_per_node=1,
    )
    with caplog.at_level(logging.INFO, logger="components"):
        summary = train(
            TrainConfig(data=str(tiny_dataset), out=str(tmp_path / "train"), plan=str(plan_file))
        )
    assert summary.epochs_run == 1 and 0 < summary.best_val_auc < 1
    ckpt = load_checkpoint(tmp_path / "train" / "best.pt")
    assert ModelConfig(**ckpt["model_config"]) == model_config(tuned)
    # Katib's metrics collector filter reads exactly one val_auc per epoch from the trainer's log
    found = re.findall(METRIC_FILTER, "\n".join(caplog.messages))
    assert [name for name, _ in found] == ["val_auc"]
    assert float(found[0][1]) == pytest.approx(summary.history[0]["val_auc"], abs=1e-4)


def test_katib_trial_entry_point_runs_the_trainer_cli(tiny_dataset, tmp_path, capsys):
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in GOOD.items()]
    common = ["--data", str(tiny_dataset), "--base-model", "debug", "--hardware", "cpu-local"]
    out = tmp_path / "trial-1"
    argv = [*common, "--out", str(out), "--global-batch", "256", "--max-epochs", "1", *flags]
    assert trial_main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("trial trial-1: lr=0.002") and "best val AUC" in printed
    architecture = ModelConfig(**load_checkpoint(out / "best.pt")["model_config"])
    assert (architecture.d_model, architecture.layers) == (GOOD["d_model"], GOOD["layers"])
    # every rank plans the same shape without launching a speed probe onto the trial's devices
    assert json.loads((out / PLAN_FILE).read_text())["estimate"]["speed_probe"] is None
    # the trainer's own exit code comes back: a bad trainer flag is its usage error
    assert trial_main([*argv, "--resume", "sometimes"]) == 2
    assert "--resume: invalid choice" in capsys.readouterr().err


def test_bad_model_config_files_are_refused(tmp_path, tiny_dataset):
    missing = tmp_path / "missing.json"
    with pytest.raises(ValueError, match="missing.json not found"):
        model_config(str(missing))
    wrong = tmp_path / "plan.json"
    wrong.write_text(json.dumps({"format": "dailyrec.plan/v1"}))
    with pytest.raises(ValueError, match="not a dailyrec.model-config/v1 file"):
        model_config(str(wrong))
    typo = tmp_path / "typo.json"
    typo.write_text(
        json.dumps(
            {
                "format": "dailyrec.model-config/v1",
                "model": {
                    "name": "x",
                    "d_model": 8,
                    "layers": 1,
                    "heads": 2,
                    "ffn": 16,
                    "dropout": 0.0,
                    "mlp": [],
                    "dmodel": 3,
                },
            }
        )
    )
    with pytest.raises(ValueError, match="unknown field model.dmodel"):
        model_config(str(typo))
    with pytest.raises(ValueError, match="unknown model config 'huge'"):
        model_config("huge")
    no_train = tmp_path / "arch.json"
    no_train.write_text(
        json.dumps(
            {
                "format": "dailyrec.model-config/v1",
                "model": {
                    "name": "arch",
                    "d_model": 8,
                    "layers": 1,
                    "heads": 2,
                    "ffn": 16,
                    "dropout": 0.0,
                    "mlp": [8],
                },
            }
        )
    )
    assert tuned_training(str(no_train)) is None  # a file without "train": the planner's defaults
    planned = estimate(EstimateConfig(data=str(tiny_dataset), model=str(no_train), probe=False))
    assert planned["train"].lr == 2e-3
    bad_train = tmp_path / "bad.json"
    bad_train.write_text(
        json.dumps(
            {
                **json.loads(no_train.read_text()),
                "train": {
                    "lr": 5.0,
                    "weight_decay": 0.0,
                    "warmup_fraction": 0.0,
                    "global_batch": 256,
                },
            }
        )
    )
    with pytest.raises(EstimateError, match="bad.json: train.lr must be in"):
        EstimateConfig(data=str(tiny_dataset), model=str(bad_train))


def test_search_resumes_and_refuses_other_settings(search, tiny_dataset, tmp_path):
    summary, shared, _ = search
    out = tmp_path / "tune"
    out.mkdir()
    shutil.copyfile(shared / "study.db", out / "study.db")  # the shared search, left untouched
    # a crash left a trial RUNNING: the next run fails it and tries its parameters again
    study = open_study(small_config(tiny_dataset, out, trials=6))
    stale = study.ask()
    stale_params = {"lr": stale.suggest_float("lr", 1e-3, 1e-3, log=True)}
    resumed = tune(small_config(tiny_dataset, out, trials=6))
    rows = resumed["trial_rows"]
    assert resumed["trials"] == 6 and resumed["failed"] == 1  # the 5 earlier trials count
    assert rows[:5] == summary["trial_rows"]
    assert rows[5]["state"] == "fail" and rows[6]["state"] in ("complete", "pruned")
    assert rows[6]["params"]["lr"] == stale_params["lr"]
    with pytest.raises(TuneError, match="other settings.*max_epochs"):
        tune(small_config(tiny_dataset, out, trials=6, max_epochs=2))


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert (
        tune_cli(["--data", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--trials", "1"])
        == Exit.USAGE  # a missing dataset is bad input
    )
    err = capsys.readouterr().err
    assert err.startswith("tune: error:") and "meta.json" in err and "Traceback" not in err
    assert tune_cli(["--data", "x", "--out", "y", "--space", '{"lr": [0.1, 2]}']) == 2
    assert "space.lr must lie in (0, 1)" in capsys.readouterr().err
    assert tune_cli(["--data", "x", "--out", "y", "--enqueue", '[{"lr": 0.5}]']) == 2
    assert "enqueue[0]: lr=0.5 is outside" in capsys.readouterr().err
    assert tune_cli(["--data", "x", "--out", "y", "--min-epochs", "4", "--max-epochs", "3"]) == 2
    from pipelines.tune import check_parameters  # the local pipeline run checks before any task

    with pytest.raises(ValueError, match="sampler must be one of"):
        check_parameters({"sampler": "grid"})
    with pytest.raises(ValueError, match="search_space: not valid JSON"):
        check_parameters({"search_space": "{lr: 1}"})


# ----------------------------------------------------------------------------- the pipeline


def test_tune_pipeline_compiles(tmp_path):
    from pipelines.tune import compile_tune

    spec, platform = yaml.safe_load_all(compile_tune(tmp_path / "tune.yaml").read_text())
    assert spec["pipelineInfo"]["name"] == "dailyrec-tune"
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"resolve-window", "preprocess-op", "tune-op"}
    assert set(tasks["tune-op"]["dependentTasks"]) == {"preprocess-op", "resolve-window"}
    assert tasks["preprocess-op"]["cachingOptions"] == {"enableCache": True}
    assert not tasks["tune-op"]["cachingOptions"].get("enableCache")
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert {"base_model", "trials", "pruner", "max_epochs", "search_space", "tracking_uri"} <= set(
        params
    )
    assert all(len(p.get("description", "")) >= 10 for p in params.values())
    mounts = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-tune-op"][
        "pvcMount"
    ]
    assert mounts[0]["mountPath"] == "/mnt/dailyrec"


def test_tune_pipeline_runs_through_kfp_local(tmp_path, monkeypatch, capsys):
    from pipelines.local import load_config
    from pipelines.tune import run_tune_local, tune_pipeline

    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", tempfile.gettempdir()))
    raw = small_world(tmp_path / "raw")
    params = load_config(
        "configs/tune-debug.json",
        {"raw_uri": str(raw), "trials": 2, "max_epochs": 1, "global_batch": 512, "seq_len": 8},
        pipeline=tune_pipeline,
    )
    summary = run_tune_local(params, tmp_path / "store", run_id="tune1")
    tempfile.tempdir = None
    assert summary["status"] == "SUCCEEDED", summary
    # the terminal gets the short console; KFP's executor JSON and the task's lines go to files
    console = capsys.readouterr().out
    logs = Path(summary["logs"])
    assert logs == tmp_path / "store" / "runs" / "tune1" / "logs"
    assert f"full logs in {logs}" in console and "tune" in console
    assert "parameterValues" not in console and len(console.splitlines()) < 40
    assert "parameterValues" in (logs / "tune-op.log").read_text()
    assert summary["trials"] == 2 and summary["pipeline"] == "dailyrec-tune"
    latest = tmp_path / "store" / "tuned" / "latest.json"
    assert json.loads(latest.read_text()) == json.loads(Path(summary["tuned_file"]).read_text())
    assert model_config(str(latest)).d_model in (8, 16)
    client = MlflowClient(sqlite_uri(tmp_path / "store" / "runs"))
    assert client.get_experiment_by_name("dailyrec-tune") is not None
