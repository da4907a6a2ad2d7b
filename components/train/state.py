"""Where a training run stands: everything a checkpoint needs to continue it exactly.

:class:`TrainState` is saved into every checkpoint through :meth:`TrainState.state_dict` and
read back by :meth:`TrainState.load_state_dict`. It holds only tensors and plain Python values,
so checkpoints keep loading with ``torch.load(weights_only=True)``; its keys are the top-level
keys the checkpoint format has always had (``epoch``, ``micro_step``, ``global_step``,
``history``, ``partial``, ``early_stop``, ``rng``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from components.train.checkpoint import CheckpointError
from components.train.schedule import EarlyStopping

STATE_KEYS = ("epoch", "micro_step", "global_step", "history", "partial", "early_stop", "rng")


@dataclass
class TrainState:
    """Epoch, step, the running epoch's loss, per-epoch history, early stopping and the RNG."""

    stopper: EarlyStopping = field(default_factory=EarlyStopping)
    """Best validation AUC, its epoch and the epochs without a gain (the patience counter)."""
    epoch: int = 0
    """The epoch running now (0-based): epochs finished so far."""
    micro_step: int = 0
    """Micro-batches of this epoch already taken: a resume skips them (the loader position)."""
    global_step: int = 0
    """Optimizer steps taken since the run started."""
    loss_sum: float = 0.0
    """This epoch's summed per-sample training loss so far (a mid-epoch resume continues it)."""
    loss_rows: int = 0
    """This process's rows behind `loss_sum`."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """One record per finished epoch: losses, validation metrics, speed."""

    @property
    def epoch_loss(self) -> float:
        """Mean training loss of this epoch so far (0 before its first row)."""
        return self.loss_sum / max(self.loss_rows, 1)

    def add_loss(self, loss_sum: float, rows: int) -> None:
        self.loss_sum += loss_sum
        self.loss_rows += rows

    def step_taken(self, micro_step: int) -> None:
        """An optimizer step ended with ``micro_step`` micro-batches of this epoch taken."""
        self.global_step += 1
        self.micro_step = micro_step

    def finish_epoch(self, record: dict[str, Any]) -> None:
        """The epoch is over: keep its record and stand at the start of the next one."""
        self.history.append(record)
        self.epoch, self.micro_step = self.epoch + 1, 0
        self.loss_sum, self.loss_rows = 0.0, 0

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values only (``weights_only`` loads); the RNG as it is now."""
        partial = {"loss_sum": self.loss_sum, "loss_rows": self.loss_rows} if self.loss_rows else {}
        return {
            "epoch": self.epoch,
            "micro_step": self.micro_step,
            "global_step": self.global_step,
            "history": [dict(record) for record in self.history],
            "partial": partial,
            "early_stop": self.stopper.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (a :meth:`state_dict`, or a whole checkpoint): sets the RNG."""
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise CheckpointError(f"cannot resume: the checkpoint lacks {', '.join(missing)}")
        self.epoch, self.micro_step = state["epoch"], state["micro_step"]
        self.global_step = state["global_step"]
        self.history = [dict(record) for record in state["history"]]
        partial = state["partial"] or {}
        self.loss_sum, self.loss_rows = partial.get("loss_sum", 0.0), partial.get("loss_rows", 0)
        self.stopper.load_state_dict(state["early_stop"])
        torch.set_rng_state(state["rng"]["torch"].cpu())
        if state["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
