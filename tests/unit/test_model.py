"""The BST CTR model: shapes, masking, gradients, checkpointing, parameter counts, configs."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

import components.train.model as model_module
from components.common.dataset import DENSE_FEATURES, SCHEMA_VERSION, array_specs
from components.common.dataset_meta import DatasetMeta, SplitInfo
from components.preprocess.config import GAP_EDGES_SECONDS, PreprocessConfig
from components.train.model import (
    NAMED_CONFIGS,
    REFERENCE_VOCAB,
    BSTModel,
    ModelConfig,
    Vocab,
    build_model,
    count_parameters,
    model_config,
)

SMALL = Vocab(
    item=500, category=40, user=300, gap=16, seq_len=12, neg_len=6, dense=len(DENSE_FEATURES)
)
NO_DROPOUT = NAMED_CONFIGS["debug"].replace(dropout=0.0, head_dropout=0.0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one thread is faster and immune to OpenMP spinning on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_batch(vocab: Vocab, hist_len, seed: int = 0, length: int | None = None) -> dict:
    """A batch in the loader's contract; padded positions hold id 0 like the real arrays."""
    gen = torch.Generator().manual_seed(seed)
    length = vocab.seq_len if length is None else length
    hist_len = torch.as_tensor(hist_len, dtype=torch.int64)
    rows = len(hist_len)
    valid = torch.arange(length).unsqueeze(0) >= (length - hist_len).unsqueeze(1)

    def ids(high, shape):
        return torch.randint(1, high, shape, generator=gen)

    neg_len = torch.randint(0, vocab.neg_len + 1, (rows,), generator=gen)
    neg_valid = torch.arange(vocab.neg_len).unsqueeze(0) >= (vocab.neg_len - neg_len).unsqueeze(1)
    return {
        "hist_item": ids(vocab.item, (rows, length)) * valid,
        "hist_cat": ids(vocab.category, (rows, length)) * valid,
        "hist_gap": ids(vocab.gap, (rows, length)) * valid,
        "hist_len": hist_len,
        "neg_item": ids(vocab.item, (rows, vocab.neg_len)) * neg_valid,
        "neg_cat": ids(vocab.category, (rows, vocab.neg_len)) * neg_valid,
        "neg_gap": ids(vocab.gap, (rows, vocab.neg_len)) * neg_valid,
        "neg_len": neg_len,
        "dense": torch.randn(rows, vocab.dense, generator=gen),
        "target_item": ids(vocab.item, (rows,)),
        "target_cat": ids(vocab.category, (rows,)),
        "user": ids(vocab.user, (rows,)),
        "context": torch.stack(
            [
                torch.randint(0, vocab.hour, (rows,), generator=gen),
                torch.randint(0, vocab.dow, (rows,), generator=gen),
            ],
            dim=1,
        ),
        "label": torch.randint(0, 2, (rows,), generator=gen).float(),
    }


def seeded_model(config=NO_DROPOUT, vocab=SMALL, seed=0, **kwargs) -> BSTModel:
    torch.manual_seed(seed)
    return build_model(config, vocab, **kwargs)


def loss_of(model, batch):
    return torch.nn.functional.binary_cross_entropy_with_logits(model(batch), batch["label"])


# --- shapes -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NAMED_CONFIGS))
def test_named_configs_give_one_float_logit_per_row(name):
    vocab = dataclasses.replace(SMALL, seq_len=REFERENCE_VOCAB[name].seq_len)
    model = build_model(name, vocab)
    batch = make_batch(vocab, [0, 1, vocab.seq_len, vocab.seq_len // 2, 3])
    for train in (True, False):
        model.train(train)
        logits = model(batch)
        assert logits.shape == (5,)
        assert logits.dtype == torch.float32
        assert torch.isfinite(logits).all()


def test_loader_dtypes_are_accepted():
    """The arrays' own dtypes (int32 ids, uint8 gaps/context, int16 lengths) give the same logits."""
    specs = array_specs(SMALL.seq_len, SMALL.neg_len)
    model = seeded_model().eval()
    batch = make_batch(SMALL, [0, 4, 12])
    narrow = {k: v.to(getattr(torch, specs[k][0])) if k in specs else v for k, v in batch.items()}
    assert narrow["hist_gap"].dtype == torch.uint8 and narrow["hist_len"].dtype == torch.int16
    with torch.no_grad():
        torch.testing.assert_close(model(narrow), model(batch), rtol=0, atol=0)


def test_history_longer_than_seq_len_is_rejected():
    model = seeded_model()
    batch = make_batch(dataclasses.replace(SMALL, seq_len=SMALL.seq_len + 1), [2])
    with pytest.raises(ValueError, match="seq_len"):
        model(batch)


# --- masking and sensitivity --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_padded_positions_never_change_the_output(seed):
    config = NAMED_CONFIGS["debug"]  # with dropout: eval mode must switch it off
    model = seeded_model(config, seed=seed).eval()
    length = SMALL.seq_len
    hist_len = [0, 1, 5, length - 1, length, 0]
    batch = make_batch(SMALL, hist_len, seed=seed)
    gen = torch.Generator().manual_seed(100 + seed)
    padded = torch.arange(length).unsqueeze(0) < (length - batch["hist_len"]).unsqueeze(1)
    noisy = dict(batch)
    for key, high in (
        ("hist_item", SMALL.item),
        ("hist_cat", SMALL.category),
        ("hist_gap", SMALL.gap),
    ):
        junk = torch.randint(0, high, batch[key].shape, generator=gen)
        noisy[key] = torch.where(padded, junk, batch[key])
    assert not torch.equal(noisy["hist_item"], batch["hist_item"])
    with torch.no_grad():
        torch.testing.assert_close(model(noisy), model(batch), rtol=0, atol=1e-6)


def test_real_history_changes_the_output_of_its_row_only():
    model = seeded_model(seed=1).eval()
    batch = make_batch(SMALL, [3, 12, 12, 0], seed=1)
    with torch.no_grad():
        base = model(batch)
        for key, column in (("hist_item", -1), ("hist_cat", -3), ("hist_gap", 0)):
            changed = {k: v.clone() for k, v in batch.items()}
            changed[key][1, column] = changed[key][1, column] % 9 + 1 + (key != "hist_gap") * 10
            out = model(changed)
            assert abs(out[1] - base[1]) > 1e-6, key
            torch.testing.assert_close(out[[0, 2, 3]], base[[0, 2, 3]], rtol=0, atol=1e-6)
        shorter = dict(batch, hist_len=torch.tensor([2, 12, 12, 0]))  # drops a real click of row 0
        assert abs(model(shorter)[0] - base[0]) > 1e-6


def test_short_histories_are_right_aligned():
    """A batch with L < seq_len equals the same batch left-padded to seq_len."""
    model = seeded_model(seed=2).eval()
    short = make_batch(SMALL, [0, 3, 7], seed=2, length=7)
    pad = SMALL.seq_len - 7
    full = dict(short)
    for key in ("hist_item", "hist_cat", "hist_gap"):
        full[key] = torch.nn.functional.pad(short[key], (pad, 0))
    with torch.no_grad():
        torch.testing.assert_close(model(short), model(full), rtol=0, atol=1e-6)


def test_eval_is_deterministic_and_training_uses_dropout():
    model = seeded_model(NAMED_CONFIGS["debug"].replace(dropout=0.3, head_dropout=0.3))
    batch = make_batch(SMALL, [0, 4, 12, 12, 8, 1], seed=3)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(batch), rtol=0, atol=0)
        model.train()
        assert not torch.allclose(model(batch), model(batch))


def test_embeddings_start_small_with_zero_padding_rows():
    model = seeded_model(NAMED_CONFIGS["local"])
    for name, table in model.embedding_tables().items():
        assert 0.01 < table.detach()[1:].std().item() < 0.04, name
    for module in (model.item_emb, model.cat_emb, model.gap_emb, model.user_emb):
        assert module.padding_idx == 0
        assert not module.weight[0].any()
    assert model.gap_emb.num_embeddings == SMALL.gap + 1  # + the target token's own gap id


# --- gradients ----------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("hist_len", [[0, 5, 12], [0, 0, 0]])
def test_every_parameter_gets_a_gradient_of_the_right_layout(sparse, hist_len):
    model = seeded_model(NAMED_CONFIGS["debug"], sparse=sparse)
    sparse_params = model.sparse_parameters()
    dense_params = model.dense_parameters()
    ids = {id(p) for p in sparse_params} | {id(p) for p in dense_params}
    assert len(ids) == len(sparse_params) + len(dense_params) == len(list(model.parameters()))
    expected_sparse = {id(model.item_emb.weight), id(model.user_emb.weight)} if sparse else set()
    assert {id(p) for p in sparse_params} == expected_sparse

    model.train()
    loss_of(model, make_batch(SMALL, hist_len, seed=4)).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert param.grad.is_sparse == (id(param) in expected_sparse), name
    touched = model.cat_emb.weight.grad.abs().sum(dim=1)
    assert touched[0] == 0 and touched.sum() > 0  # padding row stays frozen


def test_sparse_and_dense_optimizers_step_together():
    model = seeded_model(NAMED_CONFIGS["debug"], sparse=True)
    optimizers = [
        torch.optim.SparseAdam(model.sparse_parameters(), lr=1e-2),
        torch.optim.AdamW(model.dense_parameters(), lr=1e-2),
    ]
    batch = make_batch(SMALL, [0, 5, 12, 3], seed=5)
    before = model.item_emb.weight.detach().clone()
    for _ in range(2):
        for opt in optimizers:
            opt.zero_grad()
        loss_of(model, batch).backward()
        for opt in optimizers:
            opt.step()
    moved = (model.item_emb.weight.detach() != before).any(dim=1)
    used = torch.cat(
        [batch["hist_item"].flatten(), batch["neg_item"].flatten(), batch["target_item"]]
    ).unique()
    used = used[used != 0]
    assert moved[used].all()
    assert moved.sum() == len(used)  # only the rows in the batch, never the padding row


@pytest.mark.parametrize("config", [NO_DROPOUT, NAMED_CONFIGS["debug"].replace(layers=2)])
def test_activation_checkpointing_matches_plain_training(config, monkeypatch):
    calls = []
    real = model_module.checkpoint

    def counting(*args, **kwargs):
        calls.append(kwargs.get("use_reentrant"))
        return real(*args, **kwargs)

    monkeypatch.setattr(model_module, "checkpoint", counting)
    batch = make_batch(SMALL, [0, 5, 12, 7, 1], seed=6)
    results = []
    for checkpointing in (False, True):
        model = seeded_model(config, seed=7, activation_checkpointing=checkpointing).train()
        torch.manual_seed(8)  # the same dropout masks (checkpoint replays the RNG state)
        loss = loss_of(model, batch)
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    assert calls == [False] * config.layers
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=0, atol=1e-6)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-5, atol=1e-7, msg=name)


def test_checkpointing_is_off_in_eval():
    model = seeded_model(activation_checkpointing=True).eval()
    batch = make_batch(SMALL, [2, 12], seed=9)
    assert model.activation_checkpointing
    with torch.no_grad():
        torch.testing.assert_close(model(batch), seeded_model()(batch).detach(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("sparse", [False, True])
def test_empty_batch_trains(sparse):
    model = seeded_model(
        NAMED_CONFIGS["debug"], sparse=sparse, activation_checkpointing=True
    ).train()
    batch = make_batch(SMALL, torch.zeros(0, dtype=torch.int64))
    logits = model(batch)
    assert logits.shape == (0,) and logits.dtype == torch.float32
    logits.sum().backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        grad = param.grad.to_dense() if param.grad.is_sparse else param.grad
        assert not grad.any(), name


def test_local_config_learns_a_signal_only_the_sequence_carries():
    """Label = the target's category is among the valid (unpadded) history categories.

    Knowing only how long the history is gives AUC ~0.72 here; matching the
    target against the history (attention over unmasked tokens) gives ~1.
    """
    vocab = Vocab(item=300, category=12, user=50, gap=16, seq_len=8)

    def labelled(seed, rows):
        gen = torch.Generator().manual_seed(seed)
        batch = make_batch(
            vocab, torch.randint(0, vocab.seq_len + 1, (rows,), generator=gen), seed=seed
        )
        batch["hist_cat"] = batch["hist_item"] % 11 + (batch["hist_item"] > 0)  # 0 stays padding
        batch["target_cat"] = batch["target_item"] % 11 + 1
        batch["label"] = (batch["hist_cat"] == batch["target_cat"].unsqueeze(1)).any(dim=1).float()
        return batch

    torch.manual_seed(0)
    model = build_model("local", vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(120):
        optimizer.zero_grad()
        loss_of(model, labelled(step, 256)).backward()
        optimizer.step()
    model.eval()
    test = labelled(10_000, 2000)
    with torch.no_grad():
        scores = model(test)
    positive, negative = scores[test["label"] == 1], scores[test["label"] == 0]
    auc = (positive.unsqueeze(1) > negative.unsqueeze(0)).float().mean().item()
    assert auc > 0.9, auc


# --- parameter counts ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NAMED_CONFIGS))
def test_count_parameters_matches_a_real_instance(name):
    vocab = dataclasses.replace(SMALL, seq_len=REFERENCE_VOCAB[name].seq_len)
    model = build_model(name, vocab)
    counts = count_parameters(name, vocab)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["embedding"] == sum(p.numel() for p in model.embedding_tables().values())
    assert counts["embedding"] + counts["dense"] == counts["total"]
    assert counts["sparse"] == model.item_emb.weight.numel() + model.user_emb.weight.numel()
    sparse = build_model(name, vocab, sparse=True)
    assert sum(p.numel() for p in sparse.sparse_parameters()) == counts["sparse"]
    assert count_parameters(model_config(name), vocab) == counts


def documented_counts() -> dict[str, tuple[str, dict[str, int]]]:
    pattern = re.compile(
        r"^\s*(\w+)\s+(item .*?L \d+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s*$"
    )
    table = {}
    for line in model_module.__doc__.splitlines():
        match = pattern.match(line)
        if match:
            name, vocab, *numbers = match.groups()
            values = [int(n.replace(",", "")) for n in numbers]
            table[name] = (
                vocab,
                dict(zip(("embedding", "sparse", "dense", "total"), values, strict=True)),
            )
    return table


def test_documented_parameter_counts_are_current():
    table = documented_counts()
    assert set(table) == set(NAMED_CONFIGS) == set(REFERENCE_VOCAB)
    for name, (vocab_text, counts) in table.items():
        vocab = REFERENCE_VOCAB[name]
        assert counts == count_parameters(name, vocab), name
        sizes = dict(re.findall(r"(item|cat|user|gap|L) (\S+)", vocab_text))
        assert eval(sizes["item"]) == vocab.item and eval(sizes["cat"]) == vocab.category  # noqa: S307
        assert eval(sizes["user"]) == vocab.user and int(sizes["gap"]) == vocab.gap  # noqa: S307
        assert int(sizes["L"]) == vocab.seq_len


def test_reference_vocab_of_debug_and_local_is_the_preprocess_default():
    defaults = PreprocessConfig(raw="r", out="o")
    expected = Vocab(
        item=defaults.item_buckets,
        category=defaults.category_buckets,
        user=defaults.user_buckets,
        gap=len(GAP_EDGES_SECONDS) + 2,
        seq_len=defaults.seq_len,
        neg_len=defaults.neg_len,
        dense=len(DENSE_FEATURES),
    )
    assert REFERENCE_VOCAB["debug"] == REFERENCE_VOCAB["local"] == expected


def test_prod_is_about_100m_parameters_mostly_embeddings():
    counts = count_parameters("prod", REFERENCE_VOCAB["prod"])
    assert 80e6 <= counts["total"] <= 130e6
    assert counts["embedding"] > counts["total"] / 2
    local = count_parameters("local", REFERENCE_VOCAB["local"])
    assert local["total"] < counts["total"] / 4


# --- configs and vocab --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("d_model", 0),
        ("layers", 0),
        ("heads", -1),
        ("ffn", 0),
        ("context_dim", 0),
        ("user_dim", 0),
        ("dropout", 1.0),
        ("dropout", -0.1),
        ("head_dropout", 1.5),
        ("mlp", (16, 0)),
        ("activation", "tanh"),
        ("name", ""),
        ("layers", 1.5),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        NAMED_CONFIGS["debug"].replace(**{field: value})


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="d_model.*heads"):
        ModelConfig(name="x", d_model=10, layers=1, heads=3, ffn=8, dropout=0.0, mlp=())
    config = ModelConfig(name="x", d_model=12, layers=1, heads=3, ffn=8, dropout=0.0, mlp=[4])
    assert config.mlp == (4,)  # a list is stored as a tuple (the config stays hashable)
    assert build_model(config, SMALL).eval()(make_batch(SMALL, [3])).shape == (1,)


def test_unknown_config_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="nope") as info:
        model_config("nope")
    for name in NAMED_CONFIGS:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="debug"):
        build_model("nope", SMALL)
    assert model_config("local") is NAMED_CONFIGS["local"]


def test_vocab_from_meta_reads_the_dataset_meta():
    meta = DatasetMeta(
        schema_version=SCHEMA_VERSION,
        seq_len=30,
        neg_len=5,
        arrays={},
        splits={},
        buckets={"item": 1 << 10, "category": 64, "user": 512, "gap": 16, "hash": "x"},
        context_features={"hour": 24, "dow": 7},
        dense_features={"names": ["a", "b", "c"]},
    )
    assert Vocab.from_meta(meta) == Vocab(
        item=1024, category=64, user=512, gap=16, seq_len=30, neg_len=5, dense=3
    )
    with pytest.raises(ValueError, match="field context_features.hour is missing"):
        Vocab.from_meta(dataclasses.replace(meta, context_features={}))
    with pytest.raises(ValueError, match="vocab.item"):
        Vocab(item=0, category=1, user=1, gap=1, seq_len=1)


# --- skipped exposures and dense count features ---------------------------------------------


def test_skipped_exposures_and_dense_features_change_the_logit():
    model = seeded_model().eval()
    batch = make_batch(SMALL, [3, 5, 7, 2], seed=3)
    batch["neg_len"] = torch.full((4,), SMALL.neg_len)
    with torch.no_grad():
        base = model(batch)
        other_neg = dict(batch, neg_item=(batch["neg_item"] % (SMALL.item - 2)) + 1)
        assert not torch.allclose(model(other_neg), base)
        other_dense = dict(batch, dense=batch["dense"] + 1.0)
        assert not torch.allclose(model(other_dense), base)


def test_padded_skipped_positions_are_ignored():
    model = seeded_model().eval()
    batch = make_batch(SMALL, [3, 5], seed=4)
    batch["neg_len"] = torch.tensor([2, 0])
    batch["neg_item"][:, :-2] = 0
    batch["neg_item"][1] = 0
    changed = dict(batch, neg_gap=batch["neg_gap"].clone(), neg_item=batch["neg_item"].clone())
    changed["neg_gap"][0, :-2] = 5  # padding positions: ignored whatever they hold
    changed["neg_item"][1, :] = 7  # a row with no skipped exposures
    with torch.no_grad():
        torch.testing.assert_close(model(changed), model(batch), rtol=0, atol=0)


def test_a_vocab_without_skipped_or_dense_ignores_those_inputs():
    vocab = dataclasses.replace(SMALL, neg_len=0, dense=0)
    model = seeded_model(vocab=vocab).eval()
    batch = make_batch(SMALL, [3, 5], seed=5)
    plain = {k: v for k, v in batch.items() if not k.startswith("neg_") and k != "dense"}
    with torch.no_grad():
        torch.testing.assert_close(model(plain), model(batch), rtol=0, atol=0)
    assert "dense_mean" not in model.state_dict()


def test_dense_statistics_standardize_and_travel_with_the_weights():
    model = seeded_model().eval()
    batch = make_batch(SMALL, [3, 5], seed=6)
    mean, std = torch.randn(SMALL.dense), torch.rand(SMALL.dense) + 0.5
    model.set_dense_stats(mean, std)
    shifted = seeded_model().eval()  # same weights, identity statistics, pre-standardized input
    with torch.no_grad():
        expected = shifted(dict(batch, dense=(batch["dense"] - mean) / std))
        torch.testing.assert_close(model(batch), expected, rtol=1e-5, atol=1e-5)
    state = model.state_dict()
    torch.testing.assert_close(state["dense_mean"], mean)
    with pytest.raises(ValueError, match="dense statistics must have 21 columns"):
        model.set_dense_stats(mean[:3], std[:3])


def test_init_from_meta_sets_base_rate_and_dense_statistics():
    model = seeded_model()
    meta = DatasetMeta(
        schema_version=SCHEMA_VERSION,
        seq_len=SMALL.seq_len,
        neg_len=1,
        arrays={},
        splits={"train": SplitInfo(rows=10, positive_rate=0.2)},
        dense_features={"mean": [1.0] * SMALL.dense, "std": [2.0] * SMALL.dense},
    )
    model.init_from_meta(meta)
    assert model.head[-1].bias.item() == pytest.approx(math.log(0.2 / 0.8))
    torch.testing.assert_close(model.dense_scale, torch.full((SMALL.dense,), 0.5))


def test_matches_sum_the_gap_vectors_of_positions_holding_the_target():
    vocab = dataclasses.replace(SMALL, neg_len=0, dense=0)
    model = seeded_model(vocab=vocab).eval()
    batch = {
        "hist_item": torch.tensor([[9, 5, 7, 5]]),
        "hist_cat": torch.tensor([[2, 1, 1, 2]]),
        "hist_gap": torch.tensor([[6, 2, 3, 4]]),
        "hist_len": torch.tensor([3]),
        "target_item": torch.tensor([5]),
        "target_cat": torch.tensor([2]),
    }
    table = model.match_emb.weight.detach()
    rows = vocab.gap + 1  # one block of rows per (sequence, field)
    expected_item = table[2] + table[4]  # item 5 at gaps 2 and 4; position 0 is padding
    expected_cat = table[rows + 4]  # category 2 only at gap 4 among the valid positions
    with torch.no_grad():
        out = model._matches(batch)
    torch.testing.assert_close(out, torch.cat([expected_item, expected_cat]).unsqueeze(0))


def test_a_model_scores_only_ids_hashed_under_its_own_key():
    from components.train.inference import Scorer

    ours = dataclasses.replace(SMALL, id_key="aaaaaaaaaaaaaaaa")
    scorer = Scorer(model=None, vocab=ours, config=None, info={}, path="m.pt")
    assert scorer.incompatibilities(ours) == []
    (problem,) = scorer.incompatibilities(dataclasses.replace(ours, id_key="bbbbbbbbbbbbbbbb"))
    assert problem == (
        "ids hashed under key aaaaaaaaaaaaaaaa (model) vs bbbbbbbbbbbbbbbb (data): the "
        "deployment's id secret changed"
    )
    older = Scorer(model=None, vocab=SMALL, config=None, info={}, path="m.pt")  # no key recorded
    assert "under key unknown (model)" in older.incompatibilities(ours)[0]
    with pytest.raises(ValueError, match="vocab.id_key must be text"):
        dataclasses.replace(SMALL, id_key=7)
