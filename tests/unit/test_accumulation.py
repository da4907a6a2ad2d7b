"""Accumulated micro-batches (and DDP's rank average) give the gradient of one large batch."""

import numpy as np
import torch

from components.train.model import Vocab, build_model
from components.train.steps import micro_loss

VOCAB = Vocab(item=64, category=8, user=32, gap=16, seq_len=5)


def batch(n, seed=0):
    rng = np.random.default_rng(seed)
    hist_len = rng.integers(0, 6, n)
    hist = rng.integers(1, 64, (n, 5)) * (np.arange(5) >= 5 - hist_len[:, None])
    return {
        "hist_item": torch.tensor(hist),
        "hist_cat": torch.tensor(hist % 8),
        "hist_gap": torch.tensor((hist > 0) * 3),
        "hist_len": torch.tensor(hist_len),
        "target_item": torch.tensor(rng.integers(1, 64, n)),
        "target_cat": torch.tensor(rng.integers(1, 8, n)),
        "user": torch.tensor(rng.integers(1, 32, n)),
        "context": torch.tensor(rng.integers(0, 7, (n, 2))),
        "label": torch.tensor(rng.integers(0, 2, n), dtype=torch.float32),
    }


def grads(model, parts, world_size=1, step_rows=None):
    """Gradients after accumulating ``parts``; ``step_rows`` = the step's rows over all ranks."""
    model.zero_grad()
    rows = step_rows or sum(len(p["label"]) for p in parts)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    for part in parts:
        micro_loss(loss_fn(model(part), part["label"]), rows, world_size).backward()
    return {n: p.grad.clone() / world_size for n, p in model.named_parameters()}  # DDP's average


def test_accumulated_and_sharded_gradients_equal_one_large_batch():
    torch.manual_seed(0)
    model = build_model("debug", VOCAB).eval()  # eval: no dropout, so only the split differs
    full = batch(12)
    one = grads(model, [full])
    pieces = [{k: v[s] for k, v in full.items()} for s in (slice(0, 5), slice(5, 9), slice(9, 12))]
    accumulated = grads(model, pieces)
    for name in one:
        torch.testing.assert_close(accumulated[name], one[name], rtol=1e-5, atol=1e-7, msg=name)
    # two ranks, each accumulating its own share; DDP would sum-then-average their gradients
    rank0 = grads(model, pieces[:2], world_size=2, step_rows=12)
    rank1 = grads(model, pieces[2:], world_size=2, step_rows=12)
    for name in one:
        torch.testing.assert_close(
            rank0[name] + rank1[name], one[name], rtol=1e-5, atol=1e-7, msg=name
        )


def test_uneven_last_micro_batch_is_weighted_by_its_rows():
    torch.manual_seed(1)
    model = build_model("debug", VOCAB).eval()
    full = batch(7, seed=3)
    one = grads(model, [full])
    uneven = grads(
        model, [{k: v[:6] for k, v in full.items()}, {k: v[6:] for k, v in full.items()}]
    )
    for name in one:
        torch.testing.assert_close(uneven[name], one[name], rtol=1e-5, atol=1e-7, msg=name)
