"""What the register stage is told: :class:`RegisterConfig`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from components.common.registry_read import MODEL_NAME, filter_literal
from components.common.tracking import default_tracking_uri


@dataclass(frozen=True)
class RegisterConfig:
    """What to register, where, and under which name."""

    checkpoint: str
    """The candidate checkpoint that was evaluated."""
    metrics: str
    """The evaluate stage's metrics.json."""
    decision: str
    """The evaluate stage's decision.json."""
    model_name: str = MODEL_NAME
    """Registered model name."""
    tracking_uri: str = dataclasses.field(default_factory=default_tracking_uri)
    """MLflow tracking + registry URI."""
    experiment: str = "dailyrec-register"
    """Experiment of the runs that log the models."""
    register_unblessed: bool = False
    """Register a not-blessed model too, under the `challenger` alias."""
    pipeline_run_id: str = ""
    """Recorded as a tag (the KFP run that produced the model)."""
    out: str | None = None
    """Folder for registration.json (default: none)."""
    data: str | None = None
    """The dataset the candidate was trained and evaluated on (its count state and its users'
    state become the model's snapshot; default: the one named in `metrics`)."""
    user_state: bool = True
    """Carry the users' state of the window in the model (each user's last clicks and skips and
    its counts, docs/security.md), so a request may send only ids. Off: the model holds no user,
    and requests must send each user's events."""

    def __post_init__(self) -> None:
        for name in (
            "checkpoint",
            "metrics",
            "decision",
            "model_name",
            "tracking_uri",
            "experiment",
        ):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        filter_literal(self.model_name)  # a name the registry can be searched for
        if self.data is not None and (not isinstance(self.data, str) or not self.data):
            raise ValueError("data must be a non-empty string or None")
