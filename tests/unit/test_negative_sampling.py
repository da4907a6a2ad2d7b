"""Training on a sample of the negatives: which rows are kept, how the sampler walks them, and the
logit shift that keeps the model's probabilities calibrated to all rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from components.common.dataset_meta import SplitInfo
from components.common.plan import TrainPlan
from components.train.data import (
    BatchDataset,
    EpochRows,
    ShardedBatchSampler,
    kept_rows,
    row_uniform,
)
from components.train.model import ModelConfig, build_model, model_config
from components.train.trainer import trained_config


def _rows(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return (
        rng.integers(-(2**62), 2**62, n),  # hashed user keys: any int64
        rng.integers(1_700_000_000, 1_800_000_000, n),
        rng.integers(0, 50_000, n),
    )


def test_a_rows_draw_depends_on_the_row_and_the_seed_only():
    users, ts, items = _rows(200_000)
    draw = row_uniform(users, ts, items, seed=3)
    assert draw.min() >= 0 and draw.max() < 1
    # uniform: each tenth of [0, 1) holds a tenth of the rows
    counts = np.histogram(draw, bins=10, range=(0, 1))[0] / len(draw)
    assert np.abs(counts - 0.1).max() < 0.005
    # the same row gets the same draw in any order or shard; another seed another one
    order = np.random.default_rng(1).permutation(len(draw))
    assert np.array_equal(row_uniform(users[order], ts[order], items[order], 3), draw[order])
    assert np.array_equal(row_uniform(users[:10], ts[:10], items[:10], 3), draw[:10])
    other = row_uniform(users, ts, items, seed=4)
    assert abs(np.corrcoef(draw, other)[0, 1]) < 0.01
    # a neighbouring row (one second later) is drawn independently
    later = row_uniform(users, ts + 1, items, seed=3)
    assert abs(np.corrcoef(draw, later)[0, 1]) < 0.01


@pytest.mark.parametrize("keep", [0.5, 0.1])
def test_every_positive_and_the_share_of_negatives_are_kept(tiny_dataset, keep, monkeypatch):
    split = BatchDataset(tiny_dataset, "train")
    monkeypatch.setattr("components.train.data.SAMPLING_CHUNK", 301)  # chunks change nothing
    rows = kept_rows(split, keep, seed=0)
    labels = split.gather(np.arange(len(split)), ["label"])["label"]
    positives, negatives = np.flatnonzero(labels > 0), np.flatnonzero(labels == 0)
    assert np.isin(positives, rows).all()
    kept = np.isin(negatives, rows)
    assert kept.sum() == round(keep * len(negatives))  # the same count in every epoch
    # a uniform sample: each half of the split keeps its share of negatives
    half = len(negatives) // 2
    for part in (kept[:half], kept[half:]):
        assert abs(part.mean() - keep) < 4 * math.sqrt(keep * (1 - keep) / len(part))
    assert np.array_equal(rows, np.unique(rows))  # sorted, each once
    monkeypatch.setattr("components.train.data.SAMPLING_CHUNK", 1 << 20)
    assert np.array_equal(kept_rows(split, keep, seed=0), rows)
    assert not np.array_equal(kept_rows(split, keep, seed=1), rows)
    assert kept_rows(split, 1.0, seed=0) is None


def test_each_epoch_draws_its_negatives_anew_keeping_their_number(tiny_dataset):
    split = BatchDataset(tiny_dataset, "train")
    labels = split.gather(np.arange(len(split)), ["label"])["label"]
    negatives = np.flatnonzero(labels == 0)
    epochs = [kept_rows(split, 0.3, seed=7, epoch=e) for e in range(4)]
    assert np.array_equal(epochs[0], kept_rows(split, 0.3, seed=7))  # epoch 0: the seed itself
    assert len({len(rows) for rows in epochs}) == 1
    assert np.array_equal(kept_rows(split, 0.3, seed=7, epoch=2), epochs[2])  # re-runs agree
    kept = [set(np.intersect1d(rows, negatives)) for rows in epochs]
    # independent draws: two epochs share about keep x keep of the negatives, not all of them
    shared = len(kept[0] & kept[1]) / len(negatives)
    assert abs(shared - 0.09) < 4 * math.sqrt(0.09 * 0.91 / len(negatives))
    assert len(set().union(*kept)) > 2 * len(kept[0])  # four epochs see over twice one sample
    # EpochRows serves each epoch's rows, the same for the same epoch
    rows = EpochRows(split, 0.3, seed=7)
    assert len(rows) == len(epochs[0])
    for e in (0, 3, 1, 1):
        assert np.array_equal(rows(e), epochs[e])
    with pytest.raises(ValueError, match="below 1"):
        EpochRows(split, 1.0, seed=7)


def test_the_sampler_walks_each_epochs_own_rows_once_across_ranks(tiny_dataset):
    split = BatchDataset(tiny_dataset, "train")
    rows = EpochRows(split, 0.5, seed=2)
    for epoch in (0, 1):
        seen = []
        for rank in range(2):
            sampler = ShardedBatchSampler(len(rows), 8, 2, rank, seed=5, rows=rows)
            sampler.set_epoch(epoch)
            seen += list(sampler)
        assert np.array_equal(np.sort(np.concatenate(seen)), kept_rows(split, 0.5, 2, epoch))


def test_the_sampler_walks_each_kept_row_once_per_epoch_across_ranks():
    rows = np.sort(np.random.default_rng(0).choice(1000, 301, replace=False))
    for epoch in (0, 1):
        seen = []
        for rank in range(3):
            sampler = ShardedBatchSampler(len(rows), 16, 3, rank, seed=5, rows=rows)
            sampler.set_epoch(epoch)
            seen += [b for b in sampler]
            assert all(np.array_equal(b, np.sort(b)) for b in sampler)
        assert np.array_equal(np.sort(np.concatenate(seen)), rows)
    with pytest.raises(ValueError, match="rows holds 301 indices, n_rows says 300"):
        ShardedBatchSampler(300, 16, rows=rows)


def _batch(n: int, vocab) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    L, Ln = vocab.seq_len, vocab.neg_len
    return {
        "hist_item": torch.randint(0, vocab.item, (n, L), generator=g),
        "hist_cat": torch.randint(0, vocab.category, (n, L), generator=g),
        "hist_gap": torch.randint(0, vocab.gap, (n, L), generator=g),
        "hist_len": torch.randint(0, L + 1, (n,), generator=g),
        "neg_item": torch.randint(0, vocab.item, (n, Ln), generator=g),
        "neg_cat": torch.randint(0, vocab.category, (n, Ln), generator=g),
        "neg_gap": torch.randint(0, vocab.gap, (n, Ln), generator=g),
        "neg_len": torch.randint(0, Ln + 1, (n,), generator=g),
        "dense": torch.randn(n, vocab.dense, generator=g),
        "target_item": torch.randint(0, vocab.item, (n,), generator=g),
        "target_cat": torch.randint(0, vocab.category, (n,), generator=g),
        "user": torch.randint(0, vocab.user, (n,), generator=g),
        "context": torch.stack(
            [torch.randint(0, 24, (n,), generator=g), torch.randint(0, 7, (n,), generator=g)], 1
        ),
        "label": torch.zeros(n),
    }


def test_the_model_adds_the_shift_and_starts_at_the_base_rate(tiny_dataset):
    from components.common.dataset_meta import DatasetMeta
    from components.train.model import Vocab

    meta = DatasetMeta.read(tiny_dataset)
    vocab = Vocab.from_meta(meta)
    plan = TrainPlan(model="debug", negative_keep=0.25)
    assert trained_config(plan).logit_shift == pytest.approx(math.log(0.25))
    torch.manual_seed(0)
    plain = build_model("debug", vocab).eval()
    torch.manual_seed(0)
    shifted = build_model(trained_config(plan), vocab).eval()
    batch = _batch(64, vocab)
    with torch.no_grad():
        assert torch.allclose(shifted(batch), plain(batch) + math.log(0.25), atol=1e-5)
    # initialized at the data's click rate: the shift is already in the output
    rate = meta.splits["train"].positive_rate
    for model in (plain, shifted):
        model.init_from_meta(meta)
        bias = model.head[-1].bias.item() + model.config.logit_shift
        assert bias == pytest.approx(math.log(rate / (1 - rate)), abs=1e-5)


def test_a_shift_is_a_finite_number_at_most_zero():
    base = model_config("debug")
    for bad in (0.5, float("nan"), float("-inf"), "x", True):
        with pytest.raises(ValueError, match="logit_shift must be a finite number <= 0"):
            ModelConfig(**{**base.__dict__, "logit_shift": bad})
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"negative_keep must be in \(0, 1\]"):
            TrainPlan(negative_keep=bad)


def test_the_plan_carries_the_share_and_its_time_counts_the_rows_kept(tiny_dataset):
    from components.estimate.planner import EstimateConfig, estimate
    from components.estimate.rows import trained_rows

    def plan(keep):
        return estimate(
            EstimateConfig(
                data=str(tiny_dataset),
                model="debug",
                global_batch=256,
                probe=False,
                negative_keep=keep,
                negatives_per_positive=0,
            )
        )

    full, sampled = plan(1.0), plan(0.25)
    assert full["train"].negative_keep == 1.0 and sampled["train"].negative_keep == 0.25
    split = SplitInfo(rows=10_000, positive_rate=0.08)
    assert trained_rows(split, 0.25) == 800 + 2_300 and trained_rows(split, 1.0) == 10_000
    rows = sampled["estimate"]["dataset"]["train_rows"]
    assert (
        rows
        == trained_rows(train_split(tiny_dataset), 0.25)
        < full["estimate"]["dataset"]["train_rows"]
    )
    steps = [d["estimate"]["times"]["steps_per_epoch"] for d in (full, sampled)]
    assert steps[1] == math.ceil(rows / 256) < steps[0]
    assert "log(0.25)" in sampled["rationale"]["negative_keep"]


def test_at_most_so_many_negatives_per_positive_are_kept(tiny_dataset):
    """The ratio lowers the share where negatives outnumber positives by more, never raises it,
    and leaves a split where clicks are common whole."""
    from components.estimate.planner import EstimateConfig, EstimateError, estimate
    from components.estimate.rows import negative_share

    rare = SplitInfo(rows=10_000, positive_rate=0.08)  # 800 positives, 9,200 negatives
    assert negative_share(rare, 1.0, 3) == pytest.approx(2_400 / 9_200, rel=1e-3)
    assert negative_share(rare, 0.1, 3) == 0.1  # the lower of the two
    assert negative_share(rare, 0.5, 0) == 0.5  # 0: no limit
    assert negative_share(SplitInfo(rows=1_000, positive_rate=0.55), 1.0, 3) == 1.0
    assert negative_share(SplitInfo(rows=1_000, positives=200), 1.0, 3) == pytest.approx(0.75)

    train = train_split(tiny_dataset)

    def plan(**limit):
        config = EstimateConfig(
            data=str(tiny_dataset), model="debug", global_batch=256, probe=False, **limit
        )
        return estimate(config)

    assert plan()["train"].negative_keep == 1.0  # the stage's own default: no limit
    doc = plan(negatives_per_positive=3)
    expected = negative_share(train, 1.0, 3)
    assert expected < 1, "the tiny dataset has more than three negatives per positive"
    assert doc["train"].negative_keep == expected
    assert "at most 3 negatives per positive" in doc["rationale"]["negative_keep"]
    assert doc["estimate"]["dataset"]["train_rows"] < plan()["estimate"]["dataset"]["train_rows"]
    for bad in (-1, True, "3"):
        with pytest.raises(EstimateError, match="negatives_per_positive must be >= 0"):
            EstimateConfig(data=str(tiny_dataset), negatives_per_positive=bad)


def train_split(data):
    from components.common.dataset_meta import DatasetMeta

    return DatasetMeta.read(data).split("train")
