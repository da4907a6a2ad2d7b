"""The train stage on a tiny dataset: single process, torchrun, resume, warm start, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from components.common.cli import Exit
from components.common.dataset import DatasetError
from components.common.dataset_meta import DatasetMeta
from components.common.plan import TrainPlan, write_plan
from components.train.checkpoint import CheckpointError, load_checkpoint
from components.train.data import BatchDataset
from components.train.launch import LaunchError, LaunchSpec, launch, torchrun
from components.train.model import Vocab, build_model
from components.train.optim import Optimizers
from components.train.trainer import TrainConfig, train
from tests.integration.conftest import make_dataset

pytestmark = pytest.mark.integration

FAST = {"model": "debug", "micro_batch": 512, "num_workers": 0, "lr": 3e-3, "eval_batch": 2048}


def plan_file(path, **overrides):
    return str(write_plan(path, TrainPlan(**(FAST | overrides))))


def run(tiny_dataset, tmp_path, name="out", **overrides):
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(tmp_path / name),
        plan=plan_file(tmp_path / f"{name}-plan.json", **overrides),
    )
    return train(config), tmp_path / name


def test_single_process_training_writes_checkpoints_and_summary(tiny_dataset, tmp_path):
    summary, out = run(tiny_dataset, tmp_path, max_epochs=3, patience=5)
    on_disk = json.loads((out / "train_summary.json").read_text())
    assert on_disk["epochs_run"] == summary.epochs_run == 3
    for key in (
        "best_epoch",
        "best_val_auc",
        "early_stopped",
        "samples_per_s",
        "data_wait_fraction",
        "world_size",
        "precision",
        "seconds",
        "peak_memory_bytes",
        "flags",
    ):
        assert key in on_disk, key
    assert on_disk["world_size"] == 1 and on_disk["precision"] == "fp32"
    assert 0 <= on_disk["data_wait_fraction"] < 1 and on_disk["samples_per_s"] > 0
    assert load_checkpoint(out / "best.pt")["epoch_finished"] == on_disk["best_epoch"]
    # the recorded validation AUC is scikit-learn's AUC of the best model's predictions
    assert on_disk["best_val_auc"] == pytest.approx(
        val_auc_of(out / "best.pt", tiny_dataset), abs=1e-6
    )


def val_auc_of(checkpoint, data) -> float:
    """scikit-learn's AUC of a checkpoint's model over every validation row, in one process."""
    meta = DatasetMeta.read(data)
    model = build_model("debug", Vocab.from_meta(meta), sparse=True)
    model.load_state_dict(load_checkpoint(checkpoint)["model"])
    model.eval()
    val = BatchDataset(data, "val", meta)
    batch = val[np.arange(len(val))]
    with torch.no_grad():
        scores = model(batch).numpy()
    return float(roc_auc_score(batch["label"].numpy(), scores))


def test_early_stopping_stops_when_auc_stalls(tiny_dataset, tmp_path):
    # lr so small nothing improves by min_delta after the first epoch
    summary, _ = run(tiny_dataset, tmp_path, max_epochs=10, patience=2, min_delta=0.5, lr=1e-6)
    assert summary.early_stopped and summary.epochs_run == 3 and summary.best_epoch == 0


def test_resumed_run_reaches_the_same_weights(tiny_dataset, tmp_path, monkeypatch):
    settings = {"max_epochs": 2, "checkpoint_every_steps": 1, "micro_batch": 256, "grad_accum": 2}
    _, straight = run(tiny_dataset, tmp_path, "straight", **settings)

    calls = {"n": 0}
    original = Optimizers.step

    def crash_on_step_20(self, scaler):
        calls["n"] += 1
        if calls["n"] == 20:  # mid-way through the second epoch (15 steps per epoch)
            raise KeyboardInterrupt("simulated preemption")
        original(self, scaler)

    monkeypatch.setattr(Optimizers, "step", crash_on_step_20)
    with pytest.raises(KeyboardInterrupt, match="simulated preemption"):
        run(tiny_dataset, tmp_path, "resumed", **settings)
    interrupted = load_checkpoint(tmp_path / "resumed" / "last.pt")
    assert interrupted["epoch"] == 1 and interrupted["global_step"] == 19
    monkeypatch.setattr(Optimizers, "step", original)
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(tmp_path / "resumed"),
        plan=str(tmp_path / "resumed-plan.json"),
        resume="auto",
    )
    summary = train(config)
    assert summary.resumed_from.endswith("last.pt")
    a = load_checkpoint(straight / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "resumed" / "last.pt")["model"]
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)


def test_warm_start_applies_when_shapes_match_and_says_why_not(tiny_dataset, tmp_path):
    _, first = run(tiny_dataset, tmp_path, "first", max_epochs=1)
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(tmp_path / "second"),
        plan=plan_file(tmp_path / "p2.json", max_epochs=1),
        init_from=str(first / "best.pt"),
    )
    assert train(config).warm_start["applied"] is True
    other = make_dataset(tmp_path / "other", item_buckets=4096)
    config = TrainConfig(
        data=str(other),
        out=str(tmp_path / "third"),
        plan=plan_file(tmp_path / "p3.json", max_epochs=1),
        init_from=str(first / "best.pt"),
    )
    warm = train(config).warm_start
    assert warm["applied"] is False and "item_emb.weight: checkpoint (2048" in warm["reason"]


def test_bad_inputs_get_clear_errors(tiny_dataset, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dataset, broken)
    meta = json.loads((broken / "meta.json").read_text())
    (broken / "meta.json").write_text(json.dumps(meta | {"schema_version": 99}))
    with pytest.raises(DatasetError, match=r"meta\.json.*99"):
        train(
            TrainConfig(
                data=str(broken), out=str(tmp_path / "o1"), plan=plan_file(tmp_path / "p.json")
            )
        )
    (broken / "meta.json").write_text(json.dumps(meta))
    shutil.rmtree(broken / "val")
    with pytest.raises(DatasetError, match="val"):
        train(
            TrainConfig(
                data=str(broken), out=str(tmp_path / "o2"), plan=plan_file(tmp_path / "p.json")
            )
        )
    with pytest.raises(ValueError, match="fp16 needs a CUDA device"):
        train(
            TrainConfig(
                data=str(tiny_dataset),
                out=str(tmp_path / "o3"),
                plan=plan_file(tmp_path / "fp16.json", precision="fp16"),
            )
        )
    out = tmp_path / "o4"
    out.mkdir()
    (out / "last.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointError, match=r"o4/last\.pt: unreadable or corrupt"):
        train(
            TrainConfig(
                data=str(tiny_dataset),
                out=str(out),
                plan=plan_file(tmp_path / "p.json"),
                resume="auto",
            )
        )


def test_cli_exit_code_and_one_line_error(tiny_dataset, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "components.train",
            "--data",
            str(tmp_path / "nothing"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == Exit.USAGE  # a missing dataset is bad input
    assert proc.stderr.strip().splitlines()[-1].startswith("train: error (rank 0): DatasetError:")


def test_torchrun_two_processes(tiny_dataset, tmp_path):
    plan = plan_file(
        tmp_path / "plan.json", max_epochs=2, nproc_per_node=2, micro_batch=256, embedding_l2=0.5
    )
    summary = launch(LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "ddp"), plan=plan))
    assert summary.world_size == 2 and summary.epochs_run == 2
    assert summary.sparse_embeddings is True  # gloo: sparse gradients reduced across ranks
    # validation is sharded over the ranks and gathered: the AUC the run recorded is the one of
    # all validation rows scored by the saved model (half the rows, or unsynchronised replicas,
    # would give another number), and training learnt something
    recomputed = val_auc_of(tmp_path / "ddp" / "best.pt", tiny_dataset)
    assert summary.best_val_auc == pytest.approx(recomputed, abs=1e-6)
    assert summary.best_val_auc > 0.55, summary.best_val_auc


def test_restarted_workers_get_their_own_store_not_the_agents(tmp_path):
    # the agent's shared store keeps the dead workers' keys: restarted workers could read their
    # gloo addresses and hang in init_process_group (pytorch/pytorch#135712)
    script = tmp_path / "worker.py"
    script.write_text(
        "import os, pathlib, sys\n"
        "env = os.environ\n"
        "name = f\"rank{env['RANK']}-restart{env['TORCHELASTIC_RESTART_COUNT']}\"\n"
        "pathlib.Path(sys.argv[1], name).write_text(env['TORCHELASTIC_USE_AGENT_STORE'])\n"
        "sys.exit(1 if env['TORCHELASTIC_RESTART_COUNT'] == '0' else 0)\n"
    )
    done = subprocess.run(
        torchrun(2, 1, str(script), str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = {p.name: p.read_text() for p in tmp_path.glob("rank*")}
    # every restarted worker reported; a first-attempt worker may be stopped before it writes
    # (its peer's failure ends the attempt), so those are checked only where present
    assert {f"rank{r}-restart1" for r in (0, 1)} <= set(seen)
    assert set(seen.values()) == {"False"}


def test_launcher_surfaces_each_ranks_error(tiny_dataset, tmp_path):
    plan = plan_file(tmp_path / "plan.json", nproc_per_node=2, precision="fp16")
    # every rank checks the plan before it joins the process group: each refuses it in its
    # own words, none is left waiting for a peer that already left
    with pytest.raises(
        LaunchError,
        match=r"rank 0: ValueError: plan.train.precision fp16 needs a CUDA device"
        r".*rank 1: ValueError: plan.train.precision fp16",
    ):
        launch(LaunchSpec.of(data=str(tiny_dataset), out=str(tmp_path / "fail"), plan=plan))


def test_mlflow_logging_from_rank_zero(tiny_dataset, tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(tmp_path / "o"),
        tracking_uri=uri,
        experiment="test-train",
        plan=plan_file(tmp_path / "p.json", max_epochs=2, patience=5),
    )
    summary = train(config)
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("test-train").experiment_id])
    history = client.get_metric_history(run.info.run_id, "val_auc")
    assert [m.step for m in history] == [0, 1]
    assert history[-1].value == pytest.approx(summary.history[-1]["val_auc"])
    assert run.data.params["model"] == "debug" and run.data.params["world_size"] == "1"


def test_epoch_callback_can_stop_training(tiny_dataset, tmp_path):
    seen = []
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(tmp_path / "cb"),
        plan=plan_file(tmp_path / "p.json", max_epochs=4, patience=0),
    )
    summary = train(config, on_epoch=lambda record: seen.append(record["val_auc"]) or len(seen) < 2)
    assert len(seen) == 2 and summary.epochs_run == 2
    assert summary.stopped_by_callback and summary.early_stopped
    assert summary.history[-1]["val_auc"] == seen[-1]


def test_a_sample_of_the_negatives_trains_a_model_calibrated_to_all_rows(tiny_dataset, tmp_path):
    from components.train.inference import load_scorer, predict_logits, sigmoid, split_rows

    summary, out = run(tiny_dataset, tmp_path, "sampled", max_epochs=2, negative_keep=0.2)
    meta = DatasetMeta.read(tiny_dataset)
    rows, rate = meta.splits["train"].rows, meta.splits["train"].positive_rate
    expected = rows * rate + rows * (1 - rate) * 0.2
    assert abs(summary.rows_trained - expected) < 0.05 * expected
    assert summary.negative_keep == 0.2
    scorer = load_scorer(out / "best.pt")
    assert scorer.model.config.logit_shift == pytest.approx(np.log(0.2))
    (batch,) = split_rows(tiny_dataset, "val", meta, 10**6)
    logits = predict_logits(scorer.model, [batch])
    clicks = batch["label"].mean()
    # calibrated to every row: the shift brings the mean prediction to the click rate; without
    # it the model would predict the sample's (about 1 / 0.2 times the odds)
    assert abs(sigmoid(logits).mean() - clicks) < 0.3 * clicks
    assert sigmoid(logits - np.log(0.2)).mean() > 2 * clicks
    # warm start across shifts keeps the earlier model's output
    config = TrainConfig(
        data=str(tiny_dataset),
        out=str(tmp_path / "full"),
        plan=plan_file(tmp_path / "full.json", max_epochs=1),
        init_from=str(out / "best.pt"),
    )
    from components.train.trainer import Trainer

    trainer = Trainer(config)
    assert trainer.model.config.logit_shift == 0 and trainer.warm_start["applied"]
    with torch.no_grad():
        assert np.allclose(predict_logits(trainer.model.eval(), [batch]), logits, atol=1e-4)


def test_a_compiled_step_follows_the_eager_loss_trajectory(tiny_dataset, tmp_path, monkeypatch):
    """torch.compile (the GPU plans' setting, here on CPU): the same run, the same losses."""
    import torch._inductor.config

    # dropout draws from eager's generator, so that both runs drop the same units
    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    same = {"max_epochs": 2, "patience": 5, "micro_batch": 500, "sparse_embeddings": "off"}
    eager, _ = run(tiny_dataset, tmp_path, "eager", **same)
    fused, _ = run(tiny_dataset, tmp_path, "compiled", compile="default", **same)
    for a, b in zip(eager.history, fused.history, strict=True):
        assert b["train_loss"] == pytest.approx(a["train_loss"], abs=2e-4)
        assert b["val_auc"] == pytest.approx(a["val_auc"], abs=2e-3)
    with pytest.raises(ValueError, match="sparse embedding gradients do not compile"):
        run(tiny_dataset, tmp_path, "sparse", compile="default", sparse_embeddings="on")
