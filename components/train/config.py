"""The train stage's config: where the data, plan and outputs are, and how to start.

Kept apart from the trainer (and torch) so that the CLI's ``--help`` and anything that only
describes a run read it without importing torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

RESUME_MODES = ("never", "auto")


@dataclass(frozen=True)
class TrainConfig:
    """Where the data, plan and outputs are, and how to start."""

    data: str
    """Dataset folder written by the preprocess stage."""
    out: str
    """Output folder: checkpoints (best.pt, last.pt), train_summary.json."""
    plan: str | None = None
    """plan.json from the estimate stage (default: a small CPU plan, the default TrainPlan)."""
    init_from: str | None = None
    """Checkpoint to warm-start the model from (weights only), when shapes match (default: none)."""
    resume: str = dataclasses.field(default="never", metadata={"choices": RESUME_MODES})
    """auto: continue from OUT/last.pt when it exists; never: start fresh."""
    tracking_uri: str | None = None
    """MLflow tracking URI; rank 0 logs params and per-epoch metrics when given."""
    experiment: str = "dailyrec-train"
    """MLflow experiment name."""
    max_epochs: int | None = None
    """Override the plan's max_epochs, for quick runs (default: the plan's)."""

    def __post_init__(self) -> None:
        if self.resume not in RESUME_MODES:
            raise ValueError(f"resume must be one of {RESUME_MODES}, got {self.resume!r}")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {self.max_epochs}")
