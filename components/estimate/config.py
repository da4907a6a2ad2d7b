"""What the estimate stage is asked: :class:`EstimateConfig`, and its errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from components.common.plan import MEMORY_FRACTION, TrainPlan

if TYPE_CHECKING:
    from components.train.tuned import TunedTraining


class EstimateError(ValueError):
    """A request the estimator cannot plan: bad input, or an infeasible one (subclass)."""


class InfeasibleError(EstimateError):
    """The model does not fit or the deadline cannot be met; the message gives the numbers."""


@dataclass(frozen=True)
class EstimateConfig:
    """What to plan for. Every field is validated on construction."""

    data: str
    """Dataset folder written by the preprocess stage (its meta.json gives vocab and rows)."""
    model: str = "debug"
    """Named model config (debug | local | prod) or a model config file (.json); a tuned file's
    `train` block overrides base_lr, base_batch and warmup_fraction and sets weight_decay."""
    hardware: str = "cpu-local"
    """A named hardware profile or the path of a JSON profile (see hardware.py)."""
    global_batch: int = 1024
    """Samples per optimizer step across all processes (= micro × accum × world)."""
    deadline_hours: float | None = None
    """Wall-clock hours the training may take, start-up included (default: no deadline, the fewest
    devices)."""
    deadline_margin: float = 0.15
    """Headroom a plan keeps for the time model's error: it meets the deadline only when its predicted
    time x (1 + margin) fits. benchmarks/estimate.py measured the calibrated error at -3% .. +14% on
    CPU; a plan predicted to end just at the deadline would miss it about half the time."""
    probe: bool | None = None
    """Time real training steps on this machine's slice of the data and measure memory (default:
    where the profile's hardware is present: cpu-local; a GPU profile with CUDA)."""
    max_epochs: int = 3
    """Epochs the plan allows and the time estimate assumes (early stopping may end sooner)."""
    memory_fraction: float = MEMORY_FRACTION
    """Share of the device memory the plan may use, in (0, 1]. 0.88 tolerates a peak 13.6% above the
    memory model's; benchmarks/estimate.py measured -7.9% .. -0.4% against real peak RSS on CPU."""
    base_lr: float = 2e-3
    """Learning rate at `base_batch` (scaled linearly to global_batch)."""
    base_batch: int = 1024
    """Global batch of `base_lr`."""
    warmup_fraction: float = 0.05
    """Share of optimizer steps in linear warmup."""
    mfu: float | None = None
    """Model FLOPs utilization (default: the profile's measured or cited `mfu`)."""
    patience: int | None = None
    """Epochs without a validation gain before stopping (default: chosen by
    :func:`choose_patience` so early stopping can act within max_epochs)."""
    max_lost_minutes: float = 10.0
    """Most minutes of training a preemption may lose (sizes checkpoint_every_steps)."""
    negative_keep: float = 1.0
    """Share of the training negatives trained on, in (0, 1] (every positive kept; the model's
    scores stay calibrated: TrainPlan.negative_keep); the time estimate counts the rows kept.
    1 = every row; the daily pipeline passes its own `negative_keep` (pipelines/parameters.py)."""
    negatives_per_positive: float = 0.0
    """Train on at most this many negatives per positive: the share kept is `negative_keep`,
    lowered where the split's negatives outnumber its positives by more (0 = no such limit). At 3,
    a click log with a 3% click rate trains on about a tenth of its negatives and one where
    clicks are the majority on all of them; the daily pipeline passes its own
    `negatives_per_positive` (pipelines/parameters.py)."""

    def __post_init__(self) -> None:
        for name in ("global_batch", "max_epochs", "base_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise EstimateError(f"{name} must be an integer >= 1, got {value!r}")
        if self.deadline_hours is not None and not (
            isinstance(self.deadline_hours, int | float) and self.deadline_hours > 0
        ):
            raise EstimateError(f"deadline_hours must be > 0, got {self.deadline_hours!r}")
        if not (isinstance(self.deadline_margin, int | float) and 0 <= self.deadline_margin < 1):
            raise EstimateError(f"deadline_margin must be in [0, 1), got {self.deadline_margin!r}")
        if not 0 < self.memory_fraction <= 1:
            raise EstimateError(f"memory_fraction must be in (0, 1], got {self.memory_fraction!r}")
        if not 0 < self.base_lr < 1:
            raise EstimateError(f"base_lr must be in (0, 1), got {self.base_lr!r}")
        if not 0 <= self.warmup_fraction < 1:
            raise EstimateError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}")
        if self.mfu is not None and not 0 < self.mfu <= 1:
            raise EstimateError(f"mfu must be in (0, 1], got {self.mfu!r}")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 0):
            raise EstimateError(f"patience must be an integer >= 0, got {self.patience!r}")
        if not (
            isinstance(self.negative_keep, int | float)
            and not isinstance(self.negative_keep, bool)
            and 0 < self.negative_keep <= 1
        ):
            raise EstimateError(f"negative_keep must be in (0, 1], got {self.negative_keep!r}")
        if not (
            isinstance(self.negatives_per_positive, int | float)
            and not isinstance(self.negatives_per_positive, bool)
            and self.negatives_per_positive >= 0
        ):
            raise EstimateError(
                f"negatives_per_positive must be >= 0 (0 = no limit), "
                f"got {self.negatives_per_positive!r}"
            )
        if not (isinstance(self.max_lost_minutes, int | float) and self.max_lost_minutes > 0):
            raise EstimateError(f"max_lost_minutes must be > 0, got {self.max_lost_minutes!r}")
        from components.train.model import model_config  # torch: not for --help
        from components.train.tuned import tuned_training

        try:
            model_config(self.model)
            tuned = tuned_training(self.model)
        except ValueError as exc:
            raise EstimateError(str(exc)) from None
        base_lr, base_batch = (
            (tuned.lr, tuned.global_batch) if tuned else (self.base_lr, self.base_batch)
        )
        lr = base_lr * self.global_batch / base_batch
        if not lr < 1:
            raise EstimateError(
                f"the scaled lr {lr:g} (base_lr {base_lr:g} x {self.global_batch}"
                f"/{base_batch}) must be < 1; lower base_lr or global_batch"
            )

    def training(self) -> tuple[TunedTraining, bool]:
        """(lr at a batch, weight decay, warmup) this plan scales from, and whether a tuned file
        gave them; otherwise base_lr, base_batch, warmup_fraction and TrainPlan's weight decay."""
        from components.train.tuned import TunedTraining, tuned_training

        tuned = tuned_training(self.model)
        if tuned:
            return tuned, True
        defaults = TunedTraining(
            lr=self.base_lr,
            weight_decay=TrainPlan.weight_decay,
            warmup_fraction=self.warmup_fraction,
            global_batch=self.base_batch,
        )
        return defaults, False
