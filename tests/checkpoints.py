"""Checkpoints made for tests, saved as the trainer saves them."""

from __future__ import annotations

import dataclasses

from components.common.dataset_meta import DatasetMeta
from components.common.plan import TrainPlan
from components.train.checkpoint import save_checkpoint
from components.train.model import Vocab, build_model, model_config


def earlier_window(data, days: int = 1) -> dict:
    """The dataset's window moved ``days`` earlier: a checkpoint of another (earlier) day."""
    import datetime as dt

    window = dataclasses.asdict(DatasetMeta.read(data).window)
    for key in ("start", "end"):
        window[key] = (dt.date.fromisoformat(window[key]) - dt.timedelta(days=days)).isoformat()
    return window


def untrained_checkpoint(path, data, seed, vocab=None, window=None, constant=False):
    """A freshly initialized model saved like the trainer saves one: close to chance level;
    ``window`` (``{"start": ..., "end": ...}``) stands for the dataset's when given; ``constant``:
    its output layer's weights zeroed, so it scores every row alike (the base rate)."""
    import torch

    torch.manual_seed(seed)
    meta = DatasetMeta.read(data)
    vocab = vocab or Vocab.from_meta(meta)
    model = build_model("debug", vocab)
    model.set_output_bias(meta.splits["train"].positive_rate)
    if constant:
        with torch.no_grad():
            model.head[-1].weight.zero_()
    save_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "model_config": dataclasses.asdict(model_config("debug")),
            "vocab": dataclasses.asdict(vocab),
            "plan": dataclasses.asdict(TrainPlan()),
            "dataset": {
                "fingerprint": meta.fingerprint,
                "window": window or dataclasses.asdict(meta.window),
            },
        },
    )
    return path
