"""Rank 0's MLflow run of a training: parameters, the dataset, per-epoch metrics and the
learning curve; tracking failures never stop training.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.common.dataset_meta import DatasetMeta
from components.common.proctree import stop_deferred
from components.common.progress import get_logger
from components.common.stop import run_status
from components.common.train_summary import TRAIN_SUMMARY, TrainSummary
from components.train.config import TrainConfig
from components.train.runtime import Runtime

log = get_logger(__name__)


LOSS_POINTS_PER_EPOCH = 50
"""Points of the training loss an epoch logs to MLflow (its learning curve)."""


STEP_LOSS = "train_loss_by_step"
"""The learning curve's metric: the epoch's running training loss, its step the optimizer step (the
per-epoch metrics, ``train_loss`` among them, take the epoch as their step)."""


class MlflowLogger:
    """Rank 0's MLflow run, when a tracking URI is given; a no-op otherwise.

    The tracking server must answer at the start (a clear error before any
    training). If it fails later, training goes on: metrics are a report, the
    checkpoints are the product. The first failure is logged and recorded in
    the summary (``tracking_error``), and logging stops.
    """

    active: MlflowLogger | None = None
    """The logger whose run is open in this process (closed as FAILED if training raises)."""

    def __init__(
        self, config: TrainConfig, runtime: Runtime, params: dict, meta: DatasetMeta
    ) -> None:
        self.mlflow = self.started = None
        self.error: str | None = None
        self.run_id: str | None = None
        self.loss_every = 1
        if not (config.tracking_uri and runtime.is_main):
            return
        import mlflow

        from components.common.tracking import (
            connect,
            dataset_input,
            ensure_experiment,
            parent_tags,
        )

        client = connect(config.tracking_uri)
        experiment_id = ensure_experiment(client, config.experiment, config.tracking_uri)
        day = meta.window.end if meta.window else Path(config.data).name
        with stop_deferred():  # a stop now ends the run KILLED once it is open
            self.run_id = mlflow.start_run(
                experiment_id=experiment_id,
                run_name=f"train-{day}",
                log_system_metrics=True,
                tags=parent_tags(config.tracking_uri),
            ).info.run_id
            self.mlflow = self.started = mlflow
            MlflowLogger.active = self
            mlflow.log_params({k: str(v)[:500] for k, v in params.items()})
        self._call(
            "log_input",
            lambda: mlflow.log_input(
                dataset_input(config.data, meta.fingerprint), context="training"
            ),
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
            with stop_deferred():  # a write cut in half would keep the store locked
                fn()
        except Exception as exc:  # server gone or failing: keep training, say so once
            self.error = f"{what}: {type(exc).__name__}: {str(exc)[:300]}"
            log.warning("MLflow tracking failed (%s); training continues without it", self.error)
            self.mlflow = None

    def epoch(self, metrics: dict, epoch: int) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        self._call("log_metrics", lambda: self.mlflow.log_metrics(numbers, step=epoch))

    def finish(self, summary: TrainSummary) -> None:
        self._call("log_dict", lambda: self.mlflow.log_dict(summary.to_document(), TRAIN_SUMMARY))
        self.close("FAILED" if self.error else "FINISHED")

    def close(self, status: str) -> None:
        """End the run with ``status``; always: a later run in this process must start clean."""
        if self.started is not None:
            with contextlib.suppress(Exception), stop_deferred():
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
