"""Scoring with a trained model: rebuild it from a checkpoint and predict in batches.

Shared by the evaluate stage (candidate on the test split) and the registered
MLflow model (any caller's feature arrays), so both score exactly alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from components.common.dataset_meta import DatasetMeta
from components.common.hashing import same_key
from components.train.checkpoint import CheckpointError, load_checkpoint
from components.train.data import BATCH_SPEC, BatchDataset
from components.train.model import BATCH_KEYS, BSTModel, ModelConfig, Vocab

CHECKPOINT_META_KEYS = ("model_config", "vocab", "plan", "dataset", "metrics", "epoch_finished")
"""What a checkpoint says about itself besides the weights (kept when exporting a model)."""


@dataclass
class Scorer:
    """A model in eval mode plus what its checkpoint says about it."""

    model: BSTModel
    vocab: Vocab
    config: ModelConfig
    info: dict[str, Any]
    """The checkpoint's :data:`CHECKPOINT_META_KEYS` entries that are present."""
    path: str

    def incompatibilities(self, vocab: Vocab) -> list[str]:
        """Why this model cannot score a dataset of ``vocab`` (empty when it can).

        The history may be shorter than the model's (it is right-aligned) but the
        hash buckets must be identical: the same id must land in the same row.
        """
        ours = dataclasses.asdict(self.vocab)
        problems = [
            f"{name}: model {ours[name]} vs data {value}"
            for name, value in dataclasses.asdict(vocab).items()
            if name not in ("seq_len", "id_key") and ours[name] != value
        ]
        if not same_key(self.vocab.id_key, vocab.id_key):
            problems.append(
                f"ids hashed under key {self.vocab.id_key or 'unknown'} (model) vs "
                f"{vocab.id_key or 'unknown'} (data): the deployment's id secret changed"
            )
        if vocab.seq_len > self.vocab.seq_len:
            problems.append(f"seq_len: model {self.vocab.seq_len} < data {vocab.seq_len}")
        return problems


def load_scorer(path: str | Path, threads: int | None = None) -> Scorer:
    """Rebuild the model a checkpoint holds (``weights_only=True``), ready to score."""
    ckpt = load_checkpoint(path)
    try:
        config = ModelConfig(**ckpt["model_config"])
        vocab = Vocab(**ckpt["vocab"])
        model = BSTModel(config, vocab)
        model.load_state_dict(ckpt["model"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"{path}: cannot rebuild the model ({type(exc).__name__}: {exc})"
        ) from exc
    if threads:
        torch.set_num_threads(threads)
    model.eval()
    info = {k: ckpt[k] for k in CHECKPOINT_META_KEYS if k in ckpt}
    return Scorer(model=model, vocab=vocab, config=config, info=info, path=str(path))


@torch.no_grad()
def predict_logits(model: torch.nn.Module, batches: Iterable[Mapping[str, Any]]) -> np.ndarray:
    """Float64 logits of every row of ``batches`` (dicts of arrays or tensors), in order."""
    out = []
    for batch in batches:
        tensors = {k: torch.as_tensor(np.asarray(batch[k])).to(BATCH_SPEC[k]) for k in BATCH_KEYS}
        out.append(model(tensors).double().numpy())
    return np.concatenate(out) if out else np.empty(0, np.float64)


def chunks(
    arrays: Mapping[str, np.ndarray], rows: int, size: int
) -> Iterable[dict[str, np.ndarray]]:
    """Contiguous slices of ``size`` rows of every array."""
    for start in range(0, rows, size):
        yield {k: v[start : start + size] for k, v in arrays.items()}


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def split_rows(
    data_dir: str | Path,
    split: str,
    meta: DatasetMeta | None,
    batch: int,
    keys: tuple[str, ...] = (*BATCH_KEYS, "label", "user_key"),
) -> Iterable[dict[str, np.ndarray]]:
    """A split's rows in contiguous batches of raw (contract-dtype) arrays."""
    dataset = BatchDataset(data_dir, split, meta)
    for start in range(0, len(dataset), batch):
        yield dataset.gather(np.arange(start, min(start + batch, len(dataset))), keys)


def check_inputs(arrays: Mapping[str, np.ndarray], vocab: Vocab) -> int:
    """Rows in ``arrays`` after checking every model input is present, aligned and in range.

    A ValueError names the offending field: ids outside the model's hash
    buckets would otherwise read a wrong embedding row, or crash deep in torch.
    """
    missing = [k for k in BATCH_KEYS if k not in arrays]
    if missing:
        raise ValueError(f"model input lacks {', '.join(missing)} (needs {', '.join(BATCH_KEYS)})")
    rows = len(arrays["target_item"])
    limits = {
        "hist_item": vocab.item,
        "target_item": vocab.item,
        "hist_cat": vocab.category,
        "target_cat": vocab.category,
        "user": vocab.user,
        "hist_gap": vocab.gap,
        "hist_len": vocab.seq_len + 1,
        "neg_item": vocab.item,
        "neg_cat": vocab.category,
        "neg_gap": vocab.gap,
        "neg_len": vocab.neg_len + 1,
    }
    lengths = {"hist": vocab.seq_len, "neg": vocab.neg_len}
    for key in BATCH_KEYS:
        value = np.asarray(arrays[key])
        if len(value) != rows:
            raise ValueError(f"model input {key}: {len(value)} rows, target_item has {rows}")
        if key == "dense":
            if (
                not np.issubdtype(value.dtype, np.number)
                or value.ndim != 2
                or value.shape[1] != vocab.dense
            ):
                raise ValueError(
                    f"model input dense: numbers of shape [rows, {vocab.dense}] expected, "
                    f"got {value.dtype} {list(value.shape)}"
                )
            if rows and not np.isfinite(value).all():
                raise ValueError("model input dense: values must be finite")
            continue
        if not np.issubdtype(value.dtype, np.integer):
            raise ValueError(f"model input {key}: integer ids expected, got dtype {value.dtype}")
        if rows == 0:
            continue
        low, high = int(value.min()), int(value.max())
        if key == "context":
            if value.ndim != 2 or value.shape[1] != 2:
                raise ValueError(
                    f"model input context: shape [rows, 2] expected, got {list(value.shape)}"
                )
            if low < 0 or value[:, 0].max() >= vocab.hour or value[:, 1].max() >= vocab.dow:
                raise ValueError(
                    f"model input context: hour must be in 0..{vocab.hour - 1} and "
                    f"day-of-week in 0..{vocab.dow - 1}"
                )
            continue
        if low < 0 or high >= limits[key]:
            raise ValueError(
                f"model input {key}: values {low}..{high} outside the model's "
                f"range 0..{limits[key] - 1}"
            )
        sequence = key.split("_")[0]
        if (
            sequence in lengths
            and not key.endswith("_len")
            and (value.ndim != 2 or value.shape[1] > lengths[sequence])
        ):
            raise ValueError(
                f"model input {key}: shape [rows, <= {lengths[sequence]}] expected, "
                f"got {list(value.shape)}"
            )
    return rows
