"""Learning-rate schedule and early stopping: small, pure, unit-tested."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, floor: float = 0.0) -> float:
    """LR multiplier: linear warmup from ~0 to 1 over ``warmup_steps``, then cosine to ``floor``.

    ``step`` counts optimizer steps already taken (0 before the first one).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class EarlyStopping:
    """Stop after ``patience`` epochs without a gain of at least ``min_delta`` (0 = never stop early)."""

    patience: int = 3
    min_delta: float = 1e-4
    best: float = -math.inf
    best_epoch: int = -1
    bad_epochs: int = 0

    def update(self, value: float, epoch: int) -> bool:
        """Record an epoch's metric; True when it is a new best."""
        if value > self.best + self.min_delta or self.best_epoch < 0:
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
            return True
        self.bad_epochs += 1
        return False

    @property
    def should_stop(self) -> bool:
        return 0 < self.patience <= self.bad_epochs

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)
