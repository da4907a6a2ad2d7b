"""Optimizer steps over accumulated micro-batches: the loss scaling that makes accumulation and DDP
exact, mixed precision, clipping, and the epoch's statistics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from components.common.attempts import FinalError
from components.common.plan import TrainPlan
from components.train.data import ShardedBatchSampler
from components.train.model import BSTModel
from components.train.optim import IdPenalty, Optimizers
from components.train.progress import Progress
from components.train.runtime import Runtime, autocast_for, to_device
from components.train.state import TrainState


@dataclass
class EpochStats:
    """Time, data wait and samples of an epoch's steps (or a sum of epochs)."""

    loss: float = 0.0
    """Mean training loss of the epoch (whole epoch, after a mid-epoch resume too)."""
    seconds: float = 0.0
    wait_seconds: float = 0.0
    """Of `seconds`, waiting for the loader."""
    samples: int = 0
    """All ranks' rows."""

    def add(self, other: EpochStats) -> None:
        self.seconds += other.seconds
        self.wait_seconds += other.wait_seconds
        self.samples += other.samples


@dataclass
class StepRunner:
    """Optimizer steps of a model over accumulated micro-batches: DDP ``no_sync`` but on a step's
    last micro-batch, mixed precision, exact loss scaling, clipping, optimizers and schedule."""

    wrapped: torch.nn.Module
    """The model as it runs forward (DDP-wrapped when distributed)."""
    model: BSTModel
    optim: Optimizers
    scaler: torch.amp.GradScaler | None
    plan: TrainPlan
    runtime: Runtime
    penalty: IdPenalty | None = None
    loss_fn: torch.nn.Module = dataclasses.field(
        default_factory=lambda: torch.nn.BCEWithLogitsLoss(reduction="sum")  # micro_loss scales
    )

    def run_epoch(
        self,
        loader,
        sampler: ShardedBatchSampler,
        state: TrainState,
        on_step: Callable[[], None] | None = None,
        progress: Progress | None = None,
    ) -> EpochStats:
        """State's epoch (or its rest, after a resume); ``on_step()`` after each optimizer step."""
        plan = self.plan
        sampler.set_epoch(state.epoch, skip=state.micro_step)
        # rows of every optimizer step across all ranks: each micro-batch's loss is a sum over its
        # rows divided by its step's rows, so the accumulated (and DDP-averaged) gradient is
        # exactly the mean over the step's samples, whatever the rank count or a short last batch
        global_rows = sampler.global_rows(state.epoch)
        step_rows = np.add.reduceat(global_rows, np.arange(0, len(global_rows), plan.grad_accum))
        stats = EpochStats()
        self.model.train()
        batches = iter(loader)
        micro = state.micro_step
        started = time.perf_counter()
        if progress is not None:
            progress.start(micro // plan.grad_accum)
        while (batch := self._next(batches, stats)) is not None:
            step, within = divmod(micro, plan.grad_accum)
            last_micro = within == plan.grad_accum - 1 or micro == len(global_rows) - 1
            loss_sum, rows = self._forward_backward(batch, step_rows[step], last_micro)
            if not math.isfinite(loss_sum):  # a NaN model would train on, checkpoint and score
                raise Diverged(
                    f"epoch {state.epoch + 1} step {step + 1}/{len(step_rows)}: the training "
                    f"loss is {loss_sum} (not finite): the model diverged; check the plan "
                    "(lr, weight_decay, precision) and the dataset"
                )
            state.add_loss(loss_sum, rows)
            stats.samples += int(global_rows[micro])  # all ranks' rows of this micro-step
            micro += 1
            if last_micro:
                self._optimizer_step()
                state.step_taken(micro)
                if on_step is not None:
                    on_step()
                if progress is not None:
                    progress.step(
                        state.epoch, step + 1, len(step_rows), stats.samples, state.epoch_loss
                    )
        stats.seconds, stats.loss = time.perf_counter() - started, state.epoch_loss
        return stats

    @staticmethod
    def _next(batches, stats: EpochStats) -> dict[str, torch.Tensor] | None:
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is not None:
            stats.wait_seconds += time.perf_counter() - started
        return batch

    def _forward_backward(
        self, batch: dict[str, torch.Tensor], step_rows, last_micro: bool
    ) -> tuple[float, int]:
        """Backward of a micro-batch's share of its step's mean loss (all gradients reduced on the
        step's last micro-batch); the batch's summed loss and its rows."""
        runtime = self.runtime
        batch = to_device(batch, runtime.device)
        rows = len(batch["label"])
        sync = last_micro or not runtime.distributed
        with contextlib.nullcontext() if sync else self.wrapped.no_sync():
            with autocast_for(self.plan.precision, runtime.device):
                logits = self.wrapped(batch)
            # the loss of the rows trained on: without the shift that calibrates to all rows
            loss_total = self.loss_fn(logits.float() - self.plan.logit_shift, batch["label"])
            loss = micro_loss(loss_total, int(step_rows), runtime.world_size)
            if self.penalty is not None and rows:
                loss = loss + self.penalty(batch) * (rows * runtime.world_size / float(step_rows))
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return float(loss_total.detach()), rows

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            for o in self.optim.all:
                self.scaler.unscale_(o)
        if self.plan.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(list(self.model.dense_parameters()), self.plan.grad_clip)
        self.optim.step(self.scaler)
        self.optim.zero_grad()


class Diverged(FinalError):
    """The training loss became NaN or infinite: deterministic, so never retried."""


def micro_loss(loss_sum: torch.Tensor, step_rows: int, world_size: int) -> torch.Tensor:
    """A micro-batch's share of its optimizer step's mean loss.

    ``loss_sum`` sums the micro-batch's per-sample losses; ``step_rows`` counts
    the step's samples over all micro-batches and ranks. DDP averages gradients
    over ranks, hence the ``world_size`` factor: accumulated over the step, the
    gradient is exactly that of the mean loss over all its samples.
    """
    return loss_sum * (world_size / float(step_rows))
