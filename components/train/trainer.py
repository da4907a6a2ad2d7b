"""The training loop: DDP, mixed precision, accumulation, warmup + cosine, AUC early stop.

Runs alone or under ``torchrun`` unchanged: it reads only RANK, WORLD_SIZE,
LOCAL_RANK (and torch.distributed reads MASTER_ADDR/PORT). Every setting that
resources decide comes from the plan (components/common/plan.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from components.common.attempts import FinalError
from components.common.cli import Exit, exit_for
from components.common.metrics import roc_auc
from components.common.monitoring import TrainingMetrics
from components.common.plan import TrainPlan, drift_lines, plan_vs_actual, read_plan
from components.common.progress import PROGRESS, get_logger
from components.common.runs import TRAIN_SUMMARY
from components.common.stop import run_status
from components.common.storage import (
    NO_RETRY_EXIT,
    NoSpaceError,
    atomic_write_json,
    no_space,
)
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
    ShardedBatchSampler,
    eval_indices,
    kept_rows,
    load_meta,
    make_eval_loader,
    make_loader,
    require_both_labels,
)
from components.train.model import BSTModel, ModelConfig, Vocab, build_model, model_config
from components.train.schedule import EarlyStopping, warmup_cosine
from components.train.state import TrainState

log = get_logger(__name__)
SUMMARY = TRAIN_SUMMARY
LOSS_POINTS_PER_EPOCH = 50
"""Points of the training loss an epoch logs to MLflow (its learning curve)."""
STEP_LOSS = "train_loss_by_step"
"""The learning curve's metric: the epoch's running training loss, its step the optimizer step (the
per-epoch metrics, ``train_loss`` among them, take the epoch as their step)."""


@dataclass(frozen=True)
class Runtime:
    """Where this process sits in the job (from the launcher's environment)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def init_runtime() -> Runtime:
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device, backend = torch.device("cuda", local_rank), "nccl"
        torch.cuda.set_device(device)
    else:
        device, backend = torch.device("cpu"), "gloo"
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend=backend, init_method="env://", rank=rank, world_size=world_size
        )
    return Runtime(rank, world_size, local_rank, device, backend)


def autocast_for(precision: str, device: torch.device):
    """The autocast context of a precision; fp32 is no autocast at all."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def check_plan_for_device(plan: TrainPlan, runtime: Runtime) -> TrainPlan:
    """Refuse settings this device cannot run, with the reason."""
    if plan.precision == "fp16" and runtime.device.type != "cuda":
        raise ValueError("plan.train.precision fp16 needs a CUDA device (use fp32 or bf16 on CPU)")
    if (
        plan.precision == "bf16"
        and runtime.device.type == "cuda"
        and not torch.cuda.is_bf16_supported()
    ):
        raise ValueError("plan.train.precision bf16 is not supported by this GPU (use fp16)")
    if plan.sparse_embeddings == "on" and runtime.backend == "nccl" and runtime.distributed:
        raise ValueError(
            "plan.train.sparse_embeddings on: NCCL does not reduce sparse gradients (use auto)"
        )
    if plan.compile != "off" and use_sparse(plan, runtime):
        raise ValueError(
            f"plan.train.compile {plan.compile}: sparse embedding gradients do not compile; "
            "set sparse_embeddings off (on NCCL, auto is dense) or compile off"
        )
    if plan.world_size != runtime.world_size:
        log.warning(
            "plan is for %d processes, running with %d: global batch becomes %d",
            plan.world_size,
            runtime.world_size,
            plan.micro_batch * plan.grad_accum * runtime.world_size,
        )
    return plan


def compiled(module: torch.nn.Module, mode: str) -> torch.nn.Module:
    """``module`` as the training step runs it: eager (``off``) or ``torch.compile``d in
    ``mode`` (:data:`components.common.plan.COMPILE_MODES`) with static shapes, so that CUDA
    graphs can capture the step (a short last batch compiles once more)."""
    if mode == "off":
        return module
    return torch.compile(module, mode=None if mode == "default" else mode, dynamic=False)


def use_sparse(plan: TrainPlan, runtime: Runtime) -> bool:
    # gloo reduces sparse gradients (much less traffic for big tables); NCCL cannot
    if plan.sparse_embeddings == "auto":
        return runtime.backend == "gloo"
    return plan.sparse_embeddings == "on"


class Optimizers:
    """AdamW over dense parameters, SparseAdam over sparse tables, one LR schedule."""

    def __init__(self, model: BSTModel, plan: TrainPlan, total_steps: int) -> None:
        decay, no_decay = [], []
        embeddings = {id(p) for p in model.embedding_tables().values()}  # no decay on lookups
        for p in model.dense_parameters():
            (decay if p.ndim >= 2 and id(p) not in embeddings else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": plan.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # fused kernels exist for CPU and CUDA; on CPU they were ~1.7x faster here (measured)
        self.dense = torch.optim.AdamW(groups, lr=plan.lr, fused=True)
        sparse = list(model.sparse_parameters())
        self.sparse = torch.optim.SparseAdam(sparse, lr=plan.lr) if sparse else None
        warmup = int(round(plan.warmup_fraction * total_steps))
        schedule = lambda step: warmup_cosine(step, total_steps, warmup)  # noqa: E731
        self.all = [o for o in (self.dense, self.sparse) if o is not None]
        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, schedule) for o in self.all]

    def zero_grad(self) -> None:
        for o in self.all:
            o.zero_grad(set_to_none=True)

    def step(self, scaler: torch.amp.GradScaler | None) -> None:
        for o in self.all:
            if scaler is not None:
                scaler.step(o)
            else:
                o.step()
        if scaler is not None:
            scaler.update()
        for s in self.schedulers:
            s.step()

    @property
    def lr(self) -> float:
        return self.dense.param_groups[0]["lr"]

    def state_dict(self) -> dict:
        return {
            "optimizers": [o.state_dict() for o in self.all],
            "schedulers": [s.state_dict() for s in self.schedulers],
        }

    def load_state_dict(self, state: dict) -> None:
        for o, s in zip(self.all, state["optimizers"], strict=True):
            o.load_state_dict(s)
        for sch, s in zip(self.schedulers, state["schedulers"], strict=True):
            sch.load_state_dict(s)


class GpuSampler:
    """Samples GPU utilization with NVML in a thread, where nvidia-ml-py finds a GPU."""

    def __init__(self, device: torch.device, interval: float = 0.5) -> None:
        self.samples: list[float] = []
        self._seen = 0  # samples already averaged by recent()
        self._stop = threading.Event()
        self._thread = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:  # no NVML library or no permission: no samples, not an error
            return

        def run():
            while not self._stop.wait(interval):
                self.samples.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        self._stop.set()
        return float(np.mean(self.samples)) if self.samples else None

    def recent(self) -> float | None:
        """Mean utilization since the previous call (None without samples)."""
        samples, self._seen = self.samples[self._seen :], len(self.samples)
        return float(np.mean(samples)) if samples else None


def peak_memory(device: torch.device) -> tuple[int, int | None]:
    """(peak bytes, device capacity bytes): CUDA max allocated, else this process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device), torch.cuda.get_device_properties(
            device
        ).total_memory
    import psutil

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, psutil.virtual_memory().total


def diagnose(
    data_wait: float, gpu_util: float | None, peak: int, capacity: int | None
) -> list[dict]:
    """Bottleneck flags with a one-line recommendation each (the tuning guides' checklist)."""
    flags = []
    if data_wait > 0.10:
        flags.append(
            {
                "flag": "data_starved",
                "value": round(data_wait, 3),
                "recommendation": "the step waits for data over 10% of the time: raise num_workers "
                "or prefetch_factor, or move the dataset to faster local disk",
            }
        )
    if gpu_util is not None and gpu_util < 70:
        flags.append(
            {
                "flag": "gpu_underutilized",
                "value": round(gpu_util, 1),
                "recommendation": "GPU utilization under 70%: raise micro_batch (the plan's memory "
                "headroom allows it) or num_workers",
            }
        )
    if capacity and peak > 0.9 * capacity:
        flags.append(
            {
                "flag": "memory_high",
                "value": round(peak / capacity, 3),
                "recommendation": "peak memory above 90% of the device: enable activation "
                "checkpointing or lower micro_batch",
            }
        )
    return flags


def gather_predictions(runtime: Runtime, scores: np.ndarray, labels: np.ndarray):
    """All ranks' validation scores and labels, in rank order, on every rank."""
    if not runtime.distributed:
        return scores, labels
    parts: list[Any] = [None] * runtime.world_size
    dist.all_gather_object(parts, (scores, labels))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


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


class MlflowLogger:
    """Rank 0's MLflow run, when a tracking URI is given; a no-op otherwise.

    The tracking server must answer at the start (a clear error before any
    training). If it fails later, training goes on: metrics are a report, the
    checkpoints are the product. The first failure is logged and recorded in
    the summary (``tracking_error``), and logging stops.
    """

    active: MlflowLogger | None = None
    """The logger whose run is open in this process (closed as FAILED if training raises)."""

    def __init__(self, config: TrainConfig, runtime: Runtime, params: dict, meta: dict) -> None:
        self.mlflow = self.started = None
        self.error: str | None = None
        self.run_id: str | None = None
        self.loss_every = 1
        if not (config.tracking_uri and runtime.is_main):
            return
        import mlflow

        from components.common.tracking import connect, dataset_input, ensure_experiment

        client = connect(config.tracking_uri)
        experiment_id = ensure_experiment(client, config.experiment, config.tracking_uri)
        day = (meta.get("window") or {}).get("end") or Path(config.data).name
        self.run_id = mlflow.start_run(
            experiment_id=experiment_id, run_name=f"train-{day}", log_system_metrics=True
        ).info.run_id
        self.mlflow = self.started = mlflow
        MlflowLogger.active = self
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        self._call(
            "log_input",
            lambda: mlflow.log_input(dataset_input(config.data, meta), context="training"),
        )

    def train_loss(self, loss: float, step: int) -> None:
        """The running training loss of the epoch after optimizer ``step`` (the learning curve),
        every :data:`LOSS_POINTS_PER_EPOCH`-th of an epoch."""
        if self.mlflow and step % self.loss_every == 0:
            self._call("log_metric", lambda: self.mlflow.log_metric(STEP_LOSS, loss, step=step))

    def _call(self, what: str, fn: Callable[[], Any]) -> None:
        if not self.mlflow:
            return
        try:
            fn()
        except Exception as exc:  # server gone or failing: keep training, say so once
            self.error = f"{what}: {type(exc).__name__}: {str(exc)[:300]}"
            log.warning("MLflow tracking failed (%s); training continues without it", self.error)
            self.mlflow = None

    def epoch(self, metrics: dict, epoch: int) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        self._call("log_metrics", lambda: self.mlflow.log_metrics(numbers, step=epoch))

    def finish(self, summary: dict) -> None:
        self._call("log_dict", lambda: self.mlflow.log_dict(summary, SUMMARY))
        self.close("FAILED" if self.error else "FINISHED")

    def close(self, status: str) -> None:
        """End the run with ``status``; always: a later run in this process must start clean."""
        if self.started is not None:
            with contextlib.suppress(Exception):
                self.started.end_run(status)
            self.started = self.mlflow = None
        if MlflowLogger.active is self:
            MlflowLogger.active = None

    @classmethod
    def close_active(cls, exc: BaseException) -> None:
        """Training raised: end the open run FAILED (KILLED when told to stop), not MLflow's
        at-exit FINISHED."""
        if cls.active is not None:
            cls.active.close(run_status(exc))


def train(config: TrainConfig, on_epoch: Callable[[dict], bool | None] | None = None) -> dict:
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
        self.runtime = runtime = init_runtime()
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        plan, self.plan_doc = read_plan(config.plan) if config.plan else (TrainPlan(), None)
        if config.max_epochs:
            plan = plan.replace(max_epochs=config.max_epochs)
        self.plan = plan = check_plan_for_device(plan, runtime)
        self._open_data()
        self._build_model()
        # the rows trained on: every row, or the positives and a seeded sample of the negatives
        self.rows = kept_rows(self.train_set, plan.negative_keep, plan.seed)
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
                "fingerprint": self.meta.get("fingerprint"),
                "window": self.meta.get("window"),
            },
        }
        self.totals = EpochStats()  # this process's epochs (a resumed run counts its own)
        self.stopped = self.stopped_by_callback = False
        self.saved_at = 0.0  # time.perf_counter() of the latest `last` write (or of the start)

    def _open_data(self) -> None:
        config, runtime = self.config, self.runtime
        self.meta = load_meta(config.data)
        self.train_set = BatchDataset(config.data, "train", self.meta)
        self.val_set = BatchDataset(config.data, "val", self.meta)
        # else every epoch's val AUC is NaN and epoch 1 silently stays "best"
        require_both_labels(
            self.meta, "val", config.data, "validation AUC (early stopping, the best epoch)"
        )
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

    def train(self) -> dict:
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
            IdPenalty(model, self.train_set, plan.embedding_l2, self.rows)
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
                else f", {len(self.rows):,} of {len(self.train_set):,} rows (negatives kept "
                f"with p={plan.negative_keep:g}; logits shifted by {plan.logit_shift:+.3f})",
            )
        params = {
            **dataclasses.asdict(plan),
            "world_size": runtime.world_size,
            "dataset": self.meta.get("fingerprint", "")[:16],
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
        self.progress = Progress(plan, runtime, monitor=self.monitor)

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

    def finish(self) -> dict:
        """The run's summary: written by rank 0 (train_summary.json, MLflow), returned by all."""
        gpu_util = self.gpu.stop()
        if self.monitor:
            self.monitor.close()
        summary = self.summary(gpu_util)
        if self.runtime.is_main:
            atomic_write_json(self.out / SUMMARY, summary)
            for flag in summary["flags"]:
                log.warning("%s (%s): %s", flag["flag"], flag["value"], flag["recommendation"])
            for line in drift_lines(summary["plan_vs_actual"]):
                log.info("%s", line)
            self.mlf.finish(summary)
        if self.runtime.distributed:
            dist.barrier()
        return summary

    def summary(self, gpu_util: float | None) -> dict:
        """train_summary.json: the run's outcome, speed, memory, history and plan vs. actual."""
        runtime, stopper, totals = self.runtime, self.state.stopper, self.totals
        peak, capacity = peak_memory(runtime.device)
        summary = {
            "epochs_run": len(self.state.history),
            "best_epoch": stopper.best_epoch,
            "best_val_auc": stopper.best,
            "early_stopped": self.stopped,
            "stopped_by_callback": self.stopped_by_callback,
            "samples_per_s": totals.samples / max(totals.seconds, 1e-9),
            "data_wait_fraction": totals.wait_seconds / max(totals.seconds, 1e-9),
            "world_size": runtime.world_size,
            "rows_trained": len(self.train_set) if self.rows is None else len(self.rows),
            "negative_keep": self.plan.negative_keep,
            "precision": self.plan.precision,
            "seconds": time.perf_counter() - self.started,
            "device": runtime.device.type,
            "sparse_embeddings": self.sparse,
            "peak_memory_bytes": peak,
            "device_memory_bytes": capacity,
            "gpu_utilization": gpu_util,
            "history": self.state.history,
            "plan": dataclasses.asdict(self.plan),
            "plan_file": self.config.plan,
            "warm_start": self.warm_start,
            "resumed_from": self.resumed_from,
            "checkpoints": {"best": str(self.out / BEST), "last": str(self.out / LAST)},
        }
        summary["flags"] = diagnose(summary["data_wait_fraction"], gpu_util, peak, capacity)
        summary["tracking_error"] = self.mlf.error
        summary["mlflow_run_id"] = self.mlf.run_id
        if runtime.device.type == "cuda":
            summary["peak_memory_reserved_bytes"] = torch.cuda.max_memory_reserved(runtime.device)
        summary["process_seconds"] = process_seconds(self.started_wall)
        summary["plan_vs_actual"] = plan_vs_actual((self.plan_doc or {}).get("estimate"), summary)
        return summary


def process_seconds(train_started: float) -> float:
    """Wall seconds of this training: since the process started (interpreter start-up and imports
    included) when it was launched to train (torchrun, ``python -m components.train``), else since
    ``train_started`` (a ``time.time()``; train() called inside a longer-lived process)."""
    import psutil

    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    launched = (
        "TORCHELASTIC_RUN_ID" in os.environ
        or getattr(main_spec, "name", "") == "components.train.__main__"
    )
    start = psutil.Process(os.getpid()).create_time() if launched else train_started
    return time.time() - start


def duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``42s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )


class Progress:
    """Rank 0's progress lines inside an epoch, every ``plan.progress_seconds`` (0 = none).

    A line: ``epoch 2/4  step 120/480 (25%)  3,950 samples/s  loss 0.2712  ETA epoch 1m32s,
    run <= 6m10s``. The run's ETA assumes every remaining epoch runs (early stopping may end
    sooner) at this epoch's pace plus the last validation's seconds.
    """

    def __init__(
        self,
        plan: TrainPlan,
        runtime: Runtime,
        clock: Callable[[], float] = time.perf_counter,
        monitor: TrainingMetrics | None = None,
    ) -> None:
        self.every = plan.progress_seconds if runtime.is_main else 0.0
        self.monitor = monitor
        self.max_epochs = plan.max_epochs
        self.clock = clock
        self.validation_seconds = 0.0
        self._start = self._last = 0.0
        self._first_step = 0

    def start(self, first_step: int) -> None:
        self._start = self._last = self.clock()
        self._first_step = first_step

    def step(self, epoch: int, step: int, total: int, samples: float, loss: float) -> None:
        """After optimizer step ``step`` (1-based) of ``total``; ``samples`` since start()."""
        if not self.every:
            return
        now = self.clock()
        if now - self._last < self.every or step >= total:
            return
        self._last = now
        elapsed = max(now - self._start, 1e-9)
        per_step = elapsed / max(step - self._first_step, 1)
        epoch_left = (total - step) * per_step
        run_left = (
            epoch_left
            + self.validation_seconds
            + (self.max_epochs - epoch - 1) * (total * per_step + self.validation_seconds)
        )
        log.log(
            PROGRESS,
            "epoch %d/%d  step %d/%d (%.0f%%)  %s samples/s  loss %.4f  ETA epoch %s, run <= %s",
            epoch + 1,
            self.max_epochs,
            step,
            total,
            100 * step / total,
            f"{samples / elapsed:,.0f}",
            loss,
            duration(epoch_left),
            duration(run_left),
        )
        if self.monitor:
            self.monitor.set(
                samples_per_second=samples / elapsed,
                loss=loss,
                epoch=epoch + 1,
                progress_ratio=(epoch + step / total) / self.max_epochs,
            )


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


class IdPenalty:
    """DIN's mini-batch-aware L2: sum over the distinct item/user ids of a batch of
    ||e_id||^2 / (training frequency of id), so each id is penalized about once per epoch."""

    def __init__(
        self,
        model: BSTModel,
        train_set: BatchDataset,
        weight: float,
        rows: np.ndarray | None = None,
    ) -> None:
        self.model, self.weight = model, weight
        rows = np.arange(len(train_set)) if rows is None else rows  # the rows trained on
        arrays = train_set.gather(rows, ["target_item", "user"])
        device = model.item_emb.weight.device

        def inverse_frequency(ids: np.ndarray, size: int) -> torch.Tensor:
            counts = np.bincount(ids.astype(np.int64), minlength=size)
            return torch.as_tensor(1.0 / np.maximum(counts, 1), dtype=torch.float32, device=device)

        self.item_weight = inverse_frequency(arrays["target_item"], model.item_emb.num_embeddings)
        self.user_weight = inverse_frequency(arrays["user"], model.user_emb.num_embeddings)

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        items = torch.unique(batch["target_item"])
        users = torch.unique(batch["user"])
        return self.weight * (
            (self.model.item_emb(items).pow(2).sum(-1) * self.item_weight[items]).sum()
            + (self.model.user_emb(users).pow(2).sum(-1) * self.user_weight[users]).sum()
        )


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


def summary_line(summary: dict) -> str:
    return (
        f"best val AUC {summary['best_val_auc']:.4f} at epoch {summary['best_epoch'] + 1} of "
        f"{summary['epochs_run']}{' (early stop)' if summary['early_stopped'] else ''}; "
        f"{summary['samples_per_s']:.0f} samples/s on {summary['world_size']} x {summary['device']}, "
        f"data-wait {100 * summary['data_wait_fraction']:.1f}%, {summary['seconds']:.0f}s"
    )


def read_summary(out: str | Path) -> dict:
    return json.loads((Path(out) / SUMMARY).read_text())
