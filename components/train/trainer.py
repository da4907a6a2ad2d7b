"""The training loop: DDP, mixed precision, accumulation, warmup + cosine, AUC early stop.

Runs alone or under ``torchrun`` unchanged: it reads only RANK, WORLD_SIZE,
LOCAL_RANK (and torch.distributed reads MASTER_ADDR/PORT). Every setting that
resources decide comes from the plan (components/common/plan.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from components.common.cli import Exit, exit_for
from components.common.dataset_meta import DatasetMeta
from components.common.metrics import roc_auc
from components.common.monitoring import TrainingMetrics
from components.common.plan import TrainPlan, drift_lines, plan_vs_actual, read_plan
from components.common.progress import PROGRESS, get_logger
from components.common.storage import (
    NO_RETRY_EXIT,
    NoSpaceError,
    no_space,
)
from components.common.train_summary import TrainSummary
from components.train.checkpoint import (
    BEST,
    LAST,
    CheckpointError,
    load_checkpoint,
    load_resumable,
    save_checkpoint,
    save_rotating,
    shape_mismatches,
)
from components.train.config import TrainConfig
from components.train.data import (
    BatchDataset,
    EpochRows,
    ShardedBatchSampler,
    eval_indices,
    make_eval_loader,
    make_loader,
)
from components.train.mlflow_run import LOSS_POINTS_PER_EPOCH, MlflowLogger
from components.train.model import BSTModel, ModelConfig, Vocab, build_model, model_config
from components.train.optim import IdPenalty, Optimizers
from components.train.progress import Progress, process_seconds
from components.train.resources import GpuSampler, diagnose, peak_memory
from components.train.runtime import (
    Runtime,
    autocast_for,
    check_plan_for_device,
    compiled,
    gather_predictions,
    join_group,
    local_runtime,
    to_device,
    use_sparse,
)
from components.train.schedule import EarlyStopping
from components.train.state import TrainState
from components.train.steps import Diverged, EpochStats, StepRunner
from components.train.trainjob_status import TrainJobStatus

log = get_logger(__name__)


def evaluate(
    model: torch.nn.Module, dataset: BatchDataset, plan: TrainPlan, runtime: Runtime
) -> dict:
    """Validation AUC and logloss over the whole split, every row once across ranks."""
    model.eval()
    indices = eval_indices(len(dataset), runtime.world_size, runtime.rank)
    scores, labels = [], []
    with torch.no_grad(), autocast_for(plan.precision, runtime.device):
        for batch in make_eval_loader(dataset, indices, plan.eval_batch, plan, runtime.device.type):
            batch = to_device(batch, runtime.device)
            scores.append(model(batch).float().cpu().numpy())
            labels.append(batch["label"].cpu().numpy())
    model.train()
    local_scores = np.concatenate(scores) if scores else np.empty(0, np.float32)
    local_labels = np.concatenate(labels) if labels else np.empty(0, np.float32)
    all_scores, all_labels = gather_predictions(runtime, local_scores, local_labels)
    prob = np.clip(1 / (1 + np.exp(-all_scores.astype(np.float64))), 1e-7, 1 - 1e-7)
    logloss = float(-np.mean(all_labels * np.log(prob) + (1 - all_labels) * np.log(1 - prob)))
    return {
        "val_auc": roc_auc(all_scores, all_labels),
        "val_logloss": logloss,
        "val_rows": len(all_labels),
    }


def train(
    config: TrainConfig, on_epoch: Callable[[dict], bool | None] | None = None
) -> TrainSummary:
    """Train per the plan; write checkpoints and train_summary.json; return the summary.
    An exception ends the MLflow run FAILED (KILLED when told to stop: a signal, through
    :func:`components.common.stop.run_main`).

    ``on_epoch(record)`` (optional, called on rank 0 after each epoch's
    validation with the epoch's record) may return False to stop training
    there: a hyperparameter search prunes a trial this way. The decision is
    broadcast, so every rank stops together.
    """
    try:
        return Trainer(config, on_epoch).train()
    except BaseException as exc:
        MlflowLogger.close_active(exc)
        raise


class Trainer:
    """One training run: data, model, optimizers, loader and the :class:`TrainState` that the
    checkpoints carry. Building it reads the plan and data and builds the model; :meth:`train`
    resumes when asked, then runs epochs (steps, validation, checkpoints) until done."""

    def __init__(
        self, config: TrainConfig, on_epoch: Callable[[dict], bool | None] | None = None
    ) -> None:
        self.started, self.started_wall = time.perf_counter(), time.time()
        self.config, self.on_epoch = config, on_epoch
        runtime = local_runtime()
        plan, self.plan_doc = read_plan(config.plan) if config.plan else (TrainPlan(), None)
        if config.max_epochs:
            plan = plan.replace(max_epochs=config.max_epochs)
        self.plan = plan = check_plan_for_device(plan, runtime)
        self.runtime = runtime = join_group(runtime)
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._open_data()
        self._build_model()
        # the rows trained on: every row, or the positives and each epoch's sample of the negatives
        self.rows = (
            EpochRows(self.train_set, plan.negative_keep, plan.seed)
            if plan.negative_keep < 1
            else None
        )
        self.sampler = ShardedBatchSampler(
            len(self.train_set) if self.rows is None else len(self.rows),
            plan.micro_batch,
            runtime.world_size,
            runtime.rank,
            seed=plan.seed,
            rows=self.rows,
        )
        self.steps_per_epoch = math.ceil(len(self.sampler) / plan.grad_accum)
        self.optim = Optimizers(self.model, plan, self.steps_per_epoch * plan.max_epochs)
        self.scaler = torch.amp.GradScaler("cuda") if plan.precision == "fp16" else None
        self.state = TrainState(EarlyStopping(plan.patience, plan.min_delta))
        self.resumed_from: str | None = None
        self.checkpoint_meta = {
            "model_config": dataclasses.asdict(trained_config(plan)),
            "vocab": dataclasses.asdict(self.vocab),
            "plan": dataclasses.asdict(plan),
            "dataset": {
                "fingerprint": self.meta.fingerprint,
                "window": dataclasses.asdict(self.meta.window) if self.meta.window else None,
            },
        }
        self.totals = EpochStats()  # this process's epochs (a resumed run counts its own)
        self.stopped = self.stopped_by_callback = False
        self.saved_at = 0.0  # time.perf_counter() of the latest `last` write (or of the start)

    def _open_data(self) -> None:
        config, runtime = self.config, self.runtime
        self.meta = DatasetMeta.read(config.data)
        self.train_set = BatchDataset(config.data, "train", self.meta)
        self.val_set = BatchDataset(config.data, "val", self.meta)
        # else every epoch's val AUC is NaN and epoch 1 silently stays "best"
        self.meta.require_both_labels("val", "validation AUC (early stopping, the best epoch)")
        self.vocab = Vocab.from_meta(self.meta)
        if runtime.device.type == "cpu":
            torch.set_num_threads(self.plan.cpu_threads)

    def _build_model(self) -> None:
        plan, runtime = self.plan, self.runtime
        torch.manual_seed(plan.seed)
        self.sparse = use_sparse(plan, runtime)
        self.model = model = build_model(
            trained_config(plan),
            self.vocab,
            sparse=self.sparse,
            activation_checkpointing=plan.activation_checkpointing,
        ).to(runtime.device)
        # start the output at the base rate: the first steps learn features, not the click rate
        model.init_from_meta(self.meta)
        init_from = self.config.init_from
        self.warm_start = warm_start_from(model, init_from, runtime.is_main) if init_from else None
        self.wrapped = compiled(
            DDP(model, device_ids=[runtime.local_rank] if runtime.device.type == "cuda" else None)
            if runtime.distributed
            else model,
            plan.compile,
        )

    def train(self) -> TrainSummary:
        """Resume if asked; epochs of steps, validation and checkpoints; the summary."""
        self.resume()
        self._prepare_epochs()
        self._start_reports()
        self.stopped = self.state.stopper.should_stop  # a resumed run that had stopped stays so
        self.saved_at = time.perf_counter()
        while self.state.epoch < self.plan.max_epochs and not self.stopped:
            stats = self.steps.run_epoch(
                self.loader, self.sampler, self.state, self.after_step, self.progress
            )
            self.totals.add(stats)
            record, metrics, improved = self.validate(stats)
            if self.runtime.is_main:
                self.save_epoch(metrics, record["epoch"], improved)
                self.report_epoch(record)
            self.stopped = self.state.stopper.should_stop or self._callback_stops(record)
        return self.finish()

    def resume(self) -> None:
        """With ``resume="auto"``: continue from the newest usable ``last`` checkpoint, if any."""
        found = (
            load_resumable(self.out, self.runtime.device) if self.config.resume == "auto" else None
        )
        if found is None:
            return
        ckpt, path, skipped = found
        for problem in skipped:
            log.warning("skipping a damaged checkpoint: %s", problem)
        self.resumed_from = str(path)
        self.load_state_dict(ckpt)
        log.log(
            PROGRESS,
            "resumed from %s at epoch %d, micro-step %d",
            path,
            self.state.epoch,
            self.state.micro_step,
        )

    def state_dict(self, extra: dict | None = None) -> dict:
        """A checkpoint: everything needed to continue exactly where training is now."""
        return {
            **self.checkpoint_meta,
            **(extra or {}),
            "model": self.model.state_dict(),
            "optim": self.optim.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            **self.state.state_dict(),
        }

    def load_state_dict(self, ckpt: dict) -> None:
        problems = shape_mismatches(ckpt["model"], self.model.state_dict())
        if problems:
            raise CheckpointError(
                f"cannot resume: the checkpoint's model differs: {'; '.join(problems[:3])}"
            )
        self.model.load_state_dict(ckpt["model"])
        self.optim.load_state_dict(ckpt["optim"])
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.state.load_state_dict(ckpt)

    def _prepare_epochs(self) -> None:
        """The loader and the step runner (the L2 penalty counts the training ids)."""
        plan, model = self.plan, self.model
        self.loader = make_loader(self.train_set, self.sampler, plan, self.runtime.device.type)
        penalty = (
            IdPenalty(
                model,
                self.train_set,
                plan.embedding_l2,
                None if self.rows is None else self.rows(0),
            )
            if plan.embedding_l2 > 0
            else None
        )
        self.steps = StepRunner(
            self.wrapped, model, self.optim, self.scaler, plan, self.runtime, penalty
        )

    def _start_reports(self) -> None:
        """The run's first log line, MLflow run, GPU sampler and Prometheus gauges (rank 0's)."""
        plan, runtime = self.plan, self.runtime
        if runtime.is_main:
            log.log(
                PROGRESS,
                "training %s (%s params) on %d x %s, %s, micro-batch %d x accum %d x world %d = %d, "
                "%d steps/epoch, sparse embeddings %s%s",
                plan.model,
                f"{sum(p.numel() for p in self.model.parameters()):,}",
                runtime.world_size,
                runtime.device.type,
                plan.precision,
                plan.micro_batch,
                plan.grad_accum,
                runtime.world_size,
                plan.micro_batch * plan.grad_accum * runtime.world_size,
                self.steps_per_epoch,
                "on" if self.sparse else "off",
                ""
                if self.rows is None
                else f", {len(self.rows):,} of {len(self.train_set):,} rows an epoch (negatives "
                f"kept with p={plan.negative_keep:g}, drawn anew each epoch; logits shifted by "
                f"{plan.logit_shift:+.3f})",
            )
        params = {
            **dataclasses.asdict(plan),
            "world_size": runtime.world_size,
            "dataset": (self.meta.fingerprint or "")[:16],
            "sparse": self.sparse,
        }
        self.mlf = MlflowLogger(self.config, runtime, params, self.meta)
        self.mlf.loss_every = max(1, self.steps_per_epoch // LOSS_POINTS_PER_EPOCH)
        self.gpu = GpuSampler(runtime.device)
        self.monitor = TrainingMetrics.from_env(runtime.is_main)
        if self.monitor:
            estimate = (self.plan_doc or {}).get("estimate") or {}
            self.monitor.set(
                planned_samples_per_second=(estimate.get("throughput") or {}).get("samples_per_s")
            )
        times = ((self.plan_doc or {}).get("estimate") or {}).get("times") or {}
        self.progress = Progress(
            plan,
            runtime,
            monitor=self.monitor,
            status=TrainJobStatus() if runtime.is_main else None,
            planned_epoch_s=times.get("epoch_seconds"),
        )

    def after_step(self) -> None:
        """Write ``last`` every ``plan.checkpoint_every_steps`` optimizer steps and whenever
        ``plan.max_lost_minutes`` have passed since the previous write; the loss to MLflow."""
        self.mlf.train_loss(self.state.epoch_loss, self.state.global_step)
        plan, now = self.plan, time.perf_counter()
        due = (
            plan.checkpoint_every_steps
            and self.state.global_step % plan.checkpoint_every_steps == 0
        )
        overdue = plan.max_lost_minutes and now - self.saved_at >= 60 * plan.max_lost_minutes
        if due or overdue:
            if self.runtime.is_main:
                save_rotating(self.out, self.state_dict())
            self.saved_at = time.perf_counter()

    def validate(self, stats: EpochStats) -> tuple[dict, dict, bool]:
        """Validation after an epoch: the epoch's record (kept in the state's history), its
        validation metrics, and whether it is the best epoch so far."""
        epoch = self.state.epoch
        validation_started = time.perf_counter()
        metrics = evaluate(self.model, self.val_set, self.plan, self.runtime)
        self.progress.validation_seconds = time.perf_counter() - validation_started
        improved = self.state.stopper.update(metrics["val_auc"], epoch)
        record = {
            "epoch": epoch,
            "train_loss": stats.loss,
            **metrics,
            "lr": self.optim.lr,
            "samples_per_s": stats.samples / max(stats.seconds, 1e-9),
            "data_wait_fraction": stats.wait_seconds / max(stats.seconds, 1e-9),
            "seconds": stats.seconds,
            "validation_seconds": self.progress.validation_seconds,
        }
        self.state.finish_epoch(record)
        return record, metrics, improved

    def save_epoch(self, metrics: dict, epoch: int, improved: bool) -> None:
        """Rank 0, after an epoch: ``best`` when it improved, ``last`` always."""
        extra = {"metrics": metrics, "epoch_finished": epoch}
        if improved:
            save_checkpoint(self.out / BEST, self.state_dict(extra))
        save_rotating(self.out, self.state_dict(extra))
        self.saved_at = time.perf_counter()

    def report_epoch(self, record: dict) -> None:
        """Rank 0's epoch line, MLflow metrics and Prometheus gauges."""
        epoch, stopper, plan = record["epoch"], self.state.stopper, self.plan
        log.log(
            PROGRESS,
            "epoch %d/%d  loss %.4f  val_auc %.4f (best %.4f @%d)  lr %.2e  %.0f samples/s  "
            "data-wait %.1f%%  %.1fs%s",
            epoch + 1,
            plan.max_epochs,
            record["train_loss"],
            record["val_auc"],
            stopper.best,
            stopper.best_epoch + 1,
            record["lr"],
            record["samples_per_s"],
            100 * record["data_wait_fraction"],
            record["seconds"],
            "  (early stop)" if stopper.should_stop else "",
        )
        self.mlf.epoch(record, epoch)
        if self.monitor:
            self.monitor.set(
                val_auc=record["val_auc"],
                loss=record["train_loss"],
                epoch=epoch + 1,
                samples_per_second=record["samples_per_s"],
                data_wait_fraction=record["data_wait_fraction"],
                gpu_utilization_percent=self.gpu.recent(),
                progress_ratio=(epoch + 1) / plan.max_epochs,
            )
        steps = self.steps_per_epoch  # the epoch done: its pace measured, validation included
        self.progress.report(
            epoch, steps, steps, loss=record["train_loss"], val_auc=record["val_auc"]
        )

    def _callback_stops(self, record: dict) -> bool:
        """``on_epoch`` returned False on rank 0 (broadcast: every rank stops together)."""
        if self.on_epoch is None:
            return False
        stop = torch.zeros(1, dtype=torch.int32)
        if self.runtime.is_main and self.on_epoch(record) is False:
            stop[0] = 1
        if self.runtime.distributed:
            dist.broadcast(stop, src=0)
        self.stopped_by_callback = bool(stop.item())
        return self.stopped_by_callback

    def finish(self) -> TrainSummary:
        """The run's summary: written by rank 0 (train_summary.json, MLflow), returned by all."""
        gpu_util = self.gpu.stop()
        if self.monitor:
            self.monitor.close()
        if self.progress.status is not None:  # done: 100%, nothing left
            self.progress.status.update(1.0, 0.0, force=True)
        summary = self.summary(gpu_util)
        if self.runtime.is_main:
            summary.write(self.out)
            for flag in summary.flags:
                log.warning("%s (%s): %s", flag["flag"], flag["value"], flag["recommendation"])
            for line in drift_lines(summary.plan_vs_actual):
                log.info("%s", line)
            self.mlf.finish(summary)
        if self.runtime.distributed:
            dist.barrier()
        return summary

    def summary(self, gpu_util: float | None) -> TrainSummary:
        """train_summary.json: the run's outcome, speed, memory, history and plan vs. actual."""
        runtime, stopper, totals = self.runtime, self.state.stopper, self.totals
        peak, capacity = peak_memory(runtime.device)
        wait = totals.wait_seconds / max(totals.seconds, 1e-9)
        summary = TrainSummary(
            epochs_run=len(self.state.history),
            best_epoch=stopper.best_epoch,
            best_val_auc=stopper.best,
            early_stopped=self.stopped,
            stopped_by_callback=self.stopped_by_callback,
            samples_per_s=totals.samples / max(totals.seconds, 1e-9),
            data_wait_fraction=wait,
            world_size=runtime.world_size,
            rows_trained=len(self.train_set) if self.rows is None else len(self.rows),
            negative_keep=self.plan.negative_keep,
            precision=self.plan.precision,
            seconds=time.perf_counter() - self.started,
            device=runtime.device.type,
            sparse_embeddings=self.sparse,
            peak_memory_bytes=peak,
            peak_memory_reserved_bytes=(
                torch.cuda.max_memory_reserved(runtime.device)
                if runtime.device.type == "cuda"
                else None
            ),
            device_memory_bytes=capacity,
            gpu_utilization=gpu_util,
            process_seconds=process_seconds(self.started_wall),
            history=tuple(self.state.history),
            plan=dataclasses.asdict(self.plan),
            plan_file=self.config.plan,
            warm_start=self.warm_start,
            resumed_from=self.resumed_from,
            checkpoints={"best": str(self.out / BEST), "last": str(self.out / LAST)},
            flags=tuple(diagnose(wait, gpu_util, peak, capacity)),
            tracking_error=self.mlf.error,
            mlflow_run_id=self.mlf.run_id,
        )
        estimate = (self.plan_doc or {}).get("estimate")
        return dataclasses.replace(
            summary, plan_vs_actual=plan_vs_actual(estimate, summary.to_document())
        )


def trained_config(plan: TrainPlan) -> ModelConfig:
    """The plan's model config as trained: its logits shifted back by the negatives' sampling."""
    return dataclasses.replace(model_config(plan.model), logit_shift=plan.logit_shift)


def warm_start_from(model: BSTModel, path: str, verbose: bool = True) -> dict:
    """Load weights from an earlier model when every shape matches; say clearly (once) when not."""
    ckpt = load_checkpoint(path)
    problems = shape_mismatches(ckpt["model"], model.state_dict())
    if problems:
        if verbose:
            log.warning(
                "warm start from %s skipped, shapes differ (%d tensors), e.g. %s; training from scratch",
                path,
                len(problems),
                "; ".join(problems[:3]),
            )
        return {"from": path, "applied": False, "reason": "; ".join(problems[:5])}
    model.load_state_dict(ckpt["model"])
    earlier = float((ckpt.get("model_config") or {}).get("logit_shift", 0.0))
    with torch.no_grad():  # the same output as the earlier model, whatever each one's shift
        model.head[-1].bias.add_(earlier - model.config.logit_shift)
    if verbose:
        log.info("warm start: model initialized from %s", path)
    return {"from": path, "applied": True, "reason": None}


@record  # this rank's failure in torch's error file ($TORCHELASTIC_ERROR_FILE, set by torchrun)
def train_recorded(config: TrainConfig) -> None:
    """:func:`train`, its exception recorded for torchrun's agent and the launcher
    (:func:`components.train.torchrun.rank_errors`); a full disk as :class:`NoSpaceError`, whose
    message names the path and which no restart retries."""
    try:
        train(config)
    except OSError as exc:
        if no_space(exc):  # "train: no space left on <path> (N MiB free there now); ..."
            path = getattr(exc, "path", None) or getattr(exc, "filename", None) or config.out
            raise NoSpaceError(path, "train") from exc
        raise


def refuse_restart() -> int:
    """A full disk stays full: stop torchrun (SIGTERM to the agent, our parent) so it does not restart
    the workers, and exit with :data:`NO_RETRY_EXIT`."""
    if "TORCHELASTIC_RESTART_COUNT" in os.environ:  # started by torchrun's agent
        with contextlib.suppress(OSError):
            os.kill(os.getppid(), signal.SIGTERM)
    return NO_RETRY_EXIT


def main_with_errors(config: TrainConfig) -> int:
    try:
        train_recorded(config)
    except Exception as exc:
        print(
            f"train: error (rank {os.environ.get('RANK', 0)}): {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        if no_space(exc) or isinstance(exc, Diverged):  # a restart would only repeat it
            return refuse_restart()
        return exit_for(exc)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return Exit.OK
