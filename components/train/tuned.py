"""The tuned config file (``dailyrec.model-config/v1``): what a search hands to the daily pipeline.

``{"format": "dailyrec.model-config/v1", "name": ..., "model": {ModelConfig fields},
"train": {"lr", "weight_decay", "warmup_fraction", "global_batch"}, "search": {study summary}}``

* ``model_config(path)`` (:mod:`components.train.model`, beside this module) reads the ``model`` block, so the
  trainer, the planner and the checkpoints take the file wherever a config name goes;
* the estimate stage reads the ``train`` block (:func:`tuned_training`): ``lr`` is the peak
  learning rate at ``global_batch`` and is scaled linearly to the plan's global batch;
* ``search`` is for people (trials, pruned, best_val_auc, epochs_spent, ...).

Trials of the search use the same file format for their own settings, so a trial trains
exactly as the daily pipeline will train the winner.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.common.storage import atomic_write_json
from components.train.model import MODEL_CONFIG_FORMAT, ModelConfig, model_config

__all__ = [
    "MODEL_CONFIG_FORMAT",
    "TunedTraining",
    "is_config_file",
    "tuned_training",
    "write_tuned",
]


@dataclass(frozen=True)
class TunedTraining:
    """The training settings a search chose (the file's ``train`` block)."""

    lr: float
    """Peak learning rate at `global_batch` (the planner scales it linearly to its own batch)."""
    weight_decay: float
    """AdamW weight decay of the dense weights."""
    warmup_fraction: float
    """Share of optimizer steps in linear warmup, in [0, 1)."""
    global_batch: int
    """Global batch the lr was found at."""

    def __post_init__(self) -> None:
        for name in ("lr", "weight_decay", "warmup_fraction"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"train.{name} must be a number, got {value!r}")
        if not 0 < self.lr < 1:
            raise ValueError(f"train.lr must be in (0, 1), got {self.lr!r}")
        if self.weight_decay < 0:
            raise ValueError(f"train.weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(
                f"train.warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}"
            )
        if (
            not isinstance(self.global_batch, int)
            or isinstance(self.global_batch, bool)
            or self.global_batch < 1
        ):
            raise ValueError(
                f"train.global_batch must be an integer >= 1, got {self.global_batch!r}"
            )


def is_config_file(name: str) -> bool:
    """Whether a model config name is a file (as ``model_config`` decides), not a named config."""
    return isinstance(name, str) and name.endswith(".json")


def tuned_training(name: str) -> TunedTraining | None:
    """The ``train`` block of a model config file; None for a named config or a file without one."""
    if not is_config_file(name):
        return None
    model_config(name)  # the same checks (and messages) as every other reader of the file
    block = json.loads(Path(name).read_text()).get("train")
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValueError(f'model config file {name}: "train" must be an object')
    known = {f.name for f in dataclasses.fields(TunedTraining)}
    missing, unknown = sorted(known - set(block)), sorted(set(block) - known)
    if missing or unknown:
        raise ValueError(
            f"model config file {name}: "
            + (
                f"missing field train.{missing[0]}"
                if missing
                else f"unknown field train.{unknown[0]}"
            )
        )
    try:
        return TunedTraining(**block)
    except ValueError as exc:
        raise ValueError(f"model config file {name}: {exc}") from None


def write_tuned(
    path: str | Path,
    name: str,
    model: ModelConfig,
    train: TunedTraining,
    search: dict[str, Any] | None = None,
) -> Path:
    """Write a model config file atomically; the model is stored under ``name``."""
    doc = {
        "format": MODEL_CONFIG_FORMAT,
        "name": name,
        "model": dataclasses.asdict(model.replace(name=name)),
        "train": dataclasses.asdict(train),
        "search": search or {},
    }
    return atomic_write_json(path, doc)
