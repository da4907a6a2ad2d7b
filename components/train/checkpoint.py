"""Checkpoints: atomic writes, safe loads (``weights_only=True``), clear errors."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from components.common.storage import atomic_write_bytes

CHECKPOINT_FORMAT = "dailyrec.checkpoint/v1"
BEST, LAST, PREVIOUS = "best.pt", "last.pt", "last.prev.pt"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file."""


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Serialize in memory, then temp file + fsync + rename: never a half-written file."""
    buffer = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, **state}, buffer)
    return atomic_write_bytes(path, buffer.getvalue())


def save_rotating(folder: str | Path, state: dict[str, Any]) -> Path:
    """Write ``last.pt``, keeping the one before as ``last.prev.pt``: a fallback when a checkpoint
    is damaged after it was written (disk, copy, a storage layer that lies about fsync)."""
    folder = Path(folder)
    if (folder / LAST).exists():
        (folder / LAST).replace(folder / PREVIOUS)
    return save_checkpoint(folder / LAST, state)


def load_resumable(
    folder: str | Path,
    map_location: str | torch.device = "cpu",
) -> tuple[dict[str, Any], Path, list[str]] | None:
    """The newest usable of ``last.pt`` / ``last.prev.pt``: ``(state, path, problems skipped)``.

    None when neither exists; CheckpointError naming every file when all that exist are unusable.
    """
    folder = Path(folder)
    problems = []
    for path in (folder / LAST, folder / PREVIOUS):
        if not path.exists():
            continue
        try:
            return load_checkpoint(path, map_location), path, problems
        except CheckpointError as exc:
            problems.append(str(exc))
    if problems:
        raise CheckpointError("no usable checkpoint to resume from: " + "; ".join(problems))
    return None


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a dailyrec checkpoint with ``weights_only=True`` (no arbitrary code from pickles)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, bad pickle, foreign file: all unusable
        # torch's messages run to paragraphs: the first line says what is wrong
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise CheckpointError(
            f"{path}: unreadable or corrupt checkpoint ({type(exc).__name__}: {reason})"
        ) from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} checkpoint")
    return state


def shape_mismatches(
    model_state: dict[str, torch.Tensor], target: dict[str, torch.Tensor]
) -> list[str]:
    """Human-readable differences between two state dicts' keys and shapes (empty when compatible)."""
    problems = [f"{k}: missing in checkpoint" for k in target if k not in model_state]
    problems += [f"{k}: not in this model" for k in model_state if k not in target]
    problems += [
        f"{k}: checkpoint {tuple(model_state[k].shape)} vs model {tuple(target[k].shape)}"
        for k in target
        if k in model_state and model_state[k].shape != target[k].shape
    ]
    return problems
