"""The evaluate stage's config: what to evaluate, against which registry, and the gate's rule.

Kept apart from the stage (and torch) so that the CLI's ``--help`` reads it without importing
torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from components.common.registry_read import MODEL_NAME, filter_literal
from components.evaluate.decision import GateRule
from components.evaluate.guards import GuardRule

EXPERIMENT = "dailyrec-evaluate"
"""The MLflow experiment of the evaluations' runs."""


@dataclass(frozen=True)
class EvaluateConfig:
    """What to evaluate, against which registry, and the gate's rule."""

    data: str
    """Preprocessed dataset folder (meta.json + test/)."""
    checkpoint: str
    """The candidate's checkpoint (the train stage's best.pt)."""
    out: str
    """Output folder (replaced atomically)."""
    model_name: str = MODEL_NAME
    """Registered model whose `@champion` is the baseline."""
    tracking_uri: str | None = None
    """MLflow tracking/registry URI; None = no registry, the candidate is judged alone."""
    rule: GateRule = dataclasses.field(default_factory=GateRule)
    """The blessing rule (min_auc, tolerance, confidence, policy for an unusable champion)."""
    guards: GuardRule = dataclasses.field(default_factory=GuardRule)
    """Thresholds of the data guards: new days against the champion's training window."""
    batch: int = 8192
    """Rows scored per forward pass."""
    bins: int = 20
    """Equal-mass bins of the calibration curve and ECE."""
    threads: int = 1
    """torch intra-op threads (1 is fastest on small CPUs; raise on big ones)."""

    def __post_init__(self) -> None:
        for name in ("data", "checkpoint", "out", "model_name"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        filter_literal(self.model_name)  # a name the registry can be searched for
        for name in ("batch", "bins", "threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
