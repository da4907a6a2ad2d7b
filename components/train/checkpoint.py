"""Checkpoints: atomic writes, safe loads (``weights_only=True``), clear errors."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from components.common.storage import atomic_write_bytes

CHECKPOINT_FORMAT = "dailyrec.checkpoint/v1"
BEST, LAST = "best.pt", "last.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file."""


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Serialize in memory, then temp file + fsync + rename: never a half-written file."""
    buffer = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, **state}, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a dailyrec checkpoint with ``weights_only=True`` (no arbitrary code from pickles)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, bad pickle, foreign file: all unusable
        raise CheckpointError(f"{path}: unreadable or corrupt checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} checkpoint")
    return state


def shape_mismatches(model_state: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> list[str]:
    """Human-readable differences between two state dicts' keys and shapes (empty when compatible)."""
    problems = [f"{k}: missing in checkpoint" for k in target if k not in model_state]
    problems += [f"{k}: not in this model" for k in model_state if k not in target]
    problems += [
        f"{k}: checkpoint {tuple(model_state[k].shape)} vs model {tuple(target[k].shape)}"
        for k in target if k in model_state and model_state[k].shape != target[k].shape
    ]
    return problems
