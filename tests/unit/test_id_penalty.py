"""DIN's mini-batch-aware L2 on ID embeddings (plan.embedding_l2)."""

import numpy as np
import pytest
import torch

from components.common.plan import TrainPlan
from components.train.model import Vocab, build_model
from components.train.optim import IdPenalty

VOCAB = Vocab(item=16, category=4, user=8, gap=16, seq_len=3)


class TrainRows:
    """The two columns IdPenalty reads from the training split."""

    def __init__(self, target_item, user):
        self.columns = {
            "target_item": np.asarray(target_item, np.int32),
            "user": np.asarray(user, np.int32),
        }

    def __len__(self):
        return len(self.columns["user"])

    def gather(self, indices, keys):
        return {k: self.columns[k][indices] for k in keys}


def test_penalty_is_frequency_weighted_l2_of_the_distinct_ids_in_the_batch():
    torch.manual_seed(0)
    model = build_model("debug", VOCAB, sparse=True)
    rows = TrainRows(target_item=[3, 3, 3, 5], user=[1, 2, 2, 2])  # item 3 seen 3x, user 2 seen 3x
    penalty = IdPenalty(model, rows, weight=0.5)
    batch = {"target_item": torch.tensor([3, 3, 5]), "user": torch.tensor([2, 2, 2])}
    item, user = model.item_emb.weight, model.user_emb.weight
    expected = 0.5 * (
        item[3].pow(2).sum() / 3 + item[5].pow(2).sum() / 1 + user[2].pow(2).sum() / 3
    )
    value = penalty(batch)
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    value.backward()
    grad = model.item_emb.weight.grad.coalesce()
    assert sorted(grad.indices()[0].tolist()) == [3, 5]  # only the batch's rows, sparse


def test_embedding_l2_must_not_be_negative():
    with pytest.raises(ValueError, match="embedding_l2 must be >= 0"):
        TrainPlan(embedding_l2=-1.0)
