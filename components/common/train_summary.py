"""A training run's ``train_summary.json``: what the trainer measured, as one typed document.

:class:`TrainSummary` is its one writer (the trainer's rank 0, :meth:`TrainSummary.write`) and
reader (:meth:`TrainSummary.read`, :meth:`TrainSummary.from_document`; see
:class:`components.common.document.Document`): evaluate's plan-vs-actual section, the run summary,
the benchmarks and the launcher read attributes, never keys. Its format is :data:`SUMMARY_FORMAT`;
a document of another format, or one missing a field marked *required* below, is refused with a
:class:`SummaryError` naming the file and the field. docs/data.md describes every field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from components.common.document import Document, DocumentError, bounded

SUMMARY_FORMAT = "dailyrec.train_summary/v1"
TRAIN_SUMMARY = "train_summary.json"
REQUIRED = ("epochs_run", "best_val_auc", "rows_trained", "seconds", "world_size")
"""Fields every reader relies on; the rest have defaults an older writer may have left out."""


class SummaryError(DocumentError):
    """A training summary no reader can use: the message names the file and the field."""


@dataclass(frozen=True)
class TrainSummary(Document):
    """One training run's outcome, speed, memory, history and plan vs. actual."""

    FILE: ClassVar[str] = TRAIN_SUMMARY
    FORMAT: ClassVar[str] = SUMMARY_FORMAT
    REQUIRED: ClassVar[tuple[str, ...]] = REQUIRED
    WHAT: ClassVar[str] = "training summary"
    ABSENT: ClassVar[str] = "the training did not finish"
    REWRITE: ClassVar[str] = "train again"
    Error: ClassVar[type[DocumentError]] = SummaryError

    epochs_run: int = bounded(0)
    """Epochs that ran to their end (required)."""
    best_val_auc: float | None
    """Validation AUC of the best epoch, the one ``best.pt`` holds (required; None: no epoch)."""
    rows_trained: int = bounded(0)
    """Training rows of one epoch after the negatives' sampling (required)."""
    seconds: float = bounded(0)
    """Wall seconds of :func:`components.train.trainer.train` (required)."""
    world_size: int = bounded(1)
    """Training processes (required)."""
    best_epoch: int | None = None
    early_stopped: bool = False
    """Stopped by patience on validation AUC."""
    stopped_by_callback: bool = False
    """Stopped by the caller (the tuner's pruner)."""
    samples_per_s: float = 0.0
    """Training samples per second over every epoch's steps."""
    data_wait_fraction: float = 0.0
    """Share of the steps' time spent waiting for batches."""
    negative_keep: float = 1.0
    """Share of the training negatives each epoch drew (the plan's)."""
    precision: str = "fp32"
    device: str = "cpu"
    sparse_embeddings: bool = False
    peak_memory_bytes: int | None = None
    """Rank 0's peak RSS (CPU) or allocated device memory (CUDA)."""
    peak_memory_reserved_bytes: int | None = None
    """CUDA only: the allocator's peak reservation."""
    device_memory_bytes: int | None = None
    gpu_utilization: float | None = None
    process_seconds: float | None = None
    """The training process's lifetime (start-up included): what the plan's time is held to."""
    history: tuple[Mapping[str, Any], ...] = ()
    """One entry per epoch: its loss, validation metrics, learning rate, speed and seconds."""
    plan: Mapping[str, Any] = field(default_factory=dict)
    """The plan's ``train`` section as trained."""
    plan_file: str = ""
    warm_start: Mapping[str, Any] | None = None
    """``{from, applied, reason}`` where the run started from an earlier model."""
    resumed_from: str | None = None
    """The checkpoint a restarted run resumed from."""
    checkpoints: Mapping[str, str] = field(default_factory=dict)
    """``best`` and ``last`` checkpoint paths."""
    flags: tuple[Mapping[str, Any], ...] = ()
    """Diagnoses (input-bound, low GPU use, memory near capacity), each with a recommendation."""
    tracking_error: str | None = None
    """Why MLflow logging stopped, when it did (training went on)."""
    mlflow_run_id: str | None = None
    plan_vs_actual: Mapping[str, Any] | None = None
    """The plan's predictions next to the measurements
    (:func:`components.common.plan.plan_vs_actual`)."""
    source: Path | None = field(default=None, compare=False, repr=False)
    """The file it was read from (messages name it)."""

    @classmethod
    def beside(cls, checkpoint: str | Path) -> TrainSummary | None:
        """The summary of the run that wrote ``checkpoint`` (None where it is not beside it,
        e.g. a checkpoint copied elsewhere, or cannot be read)."""
        return cls.find(Path(checkpoint).parent / TRAIN_SUMMARY)

    def line(self) -> str:
        """One line for a person: the best epoch, the speed, the time."""
        best = "no epoch" if self.best_val_auc is None else f"best val AUC {self.best_val_auc:.4f}"
        epoch = "" if self.best_epoch is None else f" at epoch {self.best_epoch + 1}"
        return (
            f"{best}{epoch} of {self.epochs_run}{' (early stop)' if self.early_stopped else ''}; "
            f"{self.samples_per_s:.0f} samples/s on {self.world_size} x {self.device}, "
            f"data-wait {100 * self.data_wait_fraction:.1f}%, {self.seconds:.0f}s"
        )
