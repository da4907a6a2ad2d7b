"""The training state: what a checkpoint carries to continue a run exactly where it stopped."""

from __future__ import annotations

import math

import pytest
import torch

from components.common.plan import TrainPlan, write_plan
from components.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from components.train.schedule import EarlyStopping
from components.train.state import STATE_KEYS, TrainState
from components.train.trainer import TrainConfig, Trainer


def mid_run_state() -> TrainState:
    state = TrainState(EarlyStopping(patience=3, min_delta=0.01))
    for epoch, auc in enumerate((0.61, 0.60)):
        state.add_loss(12.5 + epoch, 50)
        state.step_taken(micro_step=4)
        state.stopper.update(auc, epoch)
        state.finish_epoch({"epoch": epoch, "train_loss": state.epoch_loss, "val_auc": auc})
    state.add_loss(7.25, 30)
    state.step_taken(micro_step=3)
    return state


def fields(state: TrainState) -> dict:
    return {
        "epoch": state.epoch,
        "micro_step": state.micro_step,
        "global_step": state.global_step,
        "loss": (state.loss_sum, state.loss_rows),
        "history": state.history,
        "stopper": state.stopper.state_dict(),
    }


def test_state_round_trips_through_state_dict_and_restores_the_rng():
    state = mid_run_state()
    assert (state.epoch, state.micro_step, state.global_step) == (2, 3, 3)
    assert state.history[0]["train_loss"] == 12.5 / 50 and state.epoch_loss == 7.25 / 30
    saved = state.state_dict()
    assert tuple(sorted(saved)) == tuple(sorted(STATE_KEYS))
    expected = torch.rand(4)  # the draws that follow the save
    restored = TrainState(EarlyStopping(patience=3, min_delta=0.01))
    restored.load_state_dict(saved)
    assert fields(restored) == fields(state)
    assert restored.stopper.bad_epochs == 1 and restored.stopper.best == 0.61
    torch.testing.assert_close(torch.rand(4), expected)
    restored.history[0]["val_auc"] = 0.0  # the restored history is its own copy
    assert state.history[0]["val_auc"] == 0.61


def test_state_round_trips_through_a_checkpoint_loaded_with_weights_only(tmp_path):
    state = mid_run_state()
    path = save_checkpoint(tmp_path / "last.pt", {"model": {}, **state.state_dict()})
    raw = torch.load(path, weights_only=True)  # plain values and tensors only
    assert raw["partial"] == {"loss_sum": 7.25, "loss_rows": 30} and raw["global_step"] == 3
    restored = TrainState()
    restored.load_state_dict(load_checkpoint(path))
    assert fields(restored) == fields(state)


def test_an_epoch_boundary_saves_no_partial_loss_and_older_checkpoints_load():
    state = TrainState()
    state.finish_epoch({"epoch": 0})
    saved = state.state_dict()
    assert saved["partial"] == {}  # the format checkpoints have always had between epochs
    state.add_loss(3.0, 4)
    state.load_state_dict(saved)
    assert (state.loss_sum, state.loss_rows, state.epoch, state.stopper.best) == (
        0.0,
        0,
        1,
        -math.inf,
    )


def test_a_checkpoint_without_the_training_state_is_refused_by_name():
    saved = TrainState().state_dict()
    del saved["micro_step"], saved["rng"]
    with pytest.raises(
        CheckpointError, match="cannot resume: the checkpoint lacks micro_step, rng"
    ):
        TrainState().load_state_dict(saved)


class StopAfter(Trainer):
    """A trainer killed right after its ``stop_at``-th optimizer step (and that step's save)."""

    stop_at = 0

    def after_step(self) -> None:
        super().after_step()
        if self.state.global_step == self.stop_at:
            raise KeyboardInterrupt("simulated preemption")


def test_a_resumed_run_continues_from_the_saved_step(tiny_dataset, tmp_path):
    plan = TrainPlan(
        model="debug",
        micro_batch=512,
        grad_accum=2,
        num_workers=0,
        max_epochs=2,
        checkpoint_every_steps=1,
        progress_seconds=0,
    )
    path = str(write_plan(tmp_path / "plan.json", plan))
    straight = Trainer(TrainConfig(data=str(tiny_dataset), out=str(tmp_path / "a"), plan=path))
    expected = straight.train()
    per_epoch = straight.steps_per_epoch
    StopAfter.stop_at = per_epoch + 3  # mid-way through the second epoch
    config = TrainConfig(data=str(tiny_dataset), out=str(tmp_path / "b"), plan=path, resume="auto")
    with pytest.raises(KeyboardInterrupt, match="simulated preemption"):
        StopAfter(config).train()

    resumed = Trainer(config)
    resumed.resume()
    assert (resumed.state.epoch, resumed.state.global_step) == (1, per_epoch + 3)
    assert resumed.state.micro_step == 3 * plan.grad_accum and resumed.state.loss_rows > 0
    assert [r["epoch"] for r in resumed.state.history] == [0]
    summary = Trainer(config).train()
    assert summary.resumed_from.endswith("last.pt")
    assert [r["epoch"] for r in summary.history] == [0, 1]  # each epoch once
    assert load_checkpoint(tmp_path / "b" / "last.pt")["global_step"] == 2 * per_epoch
    assert summary.history[1]["train_loss"] == pytest.approx(
        expected.history[1]["train_loss"], rel=1e-5
    )
    a = load_checkpoint(tmp_path / "a" / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "b" / "last.pt")["model"]
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)
