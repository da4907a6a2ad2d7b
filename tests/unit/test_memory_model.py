"""The plan's memory model, term by term, on shapes small enough to count by hand.

Each expected value is written out from the terms components/estimate/memory.py documents
(what one pre-norm encoder layer, the lookups and the head keep for backward), with
dimensions chosen pairwise different so a wrong factor or a dropped term shows. The
agreement of those terms with what autograd really saves is tested against the probe in
tests/unit/test_estimate.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from components.estimate import memory as mem
from components.train.model import DENSE_FREQUENCIES, ModelConfig, Vocab, head_width

# d = 4, f = 10, h = 2; tokens T = seq_len + 1 = 3
CFG = ModelConfig(
    name="hand",
    d_model=4,
    layers=3,
    heads=2,
    ffn=10,
    dropout=0.1,
    mlp=(6,),
    context_dim=3,
    dense_embed=2,
    match_dim=2,
)
VOCAB = Vocab(item=50, category=7, user=30, gap=5, seq_len=2, neg_len=3, dense=2)
PLAIN = Vocab(item=50, category=7, user=30, gap=5, seq_len=2)
T = 3


def test_per_element_sizes():
    """fp32 activations 4 bytes, bf16/fp16 2; a CUDA dropout keeps a 1-byte mask, the CPU kernel a
    noise tensor of the activations' type."""
    assert [mem._act_bytes(p) for p in ("fp32", "bf16", "fp16")] == [4, 2, 2]
    assert [mem._mask_bytes(p, "cpu") for p in ("fp32", "bf16", "fp16")] == [4, 2, 2]
    assert [mem._mask_bytes(p, "cuda") for p in ("fp32", "bf16", "fp16")] == [1, 1, 1]


# norms: 2 * (4*T*d + 8*T) = 2 * (48 + 24) = 144, whatever the precision (fp32 residual stream)
NORMS = 144


@pytest.mark.parametrize(
    ("precision", "device", "dropout", "expected"),
    [
        # projections' inputs 3*A*T*d + q, k, v 3*A*T*d; CPU math attention with dropout: scaled q, k
        # 2*A*T*d and softmax, noise, dropped probabilities h*T*T*(2A + M); feed-forward 2*A*T*f;
        # dropout masks M*(2*T*d + T*f)
        ("fp32", "cpu", 0.1, NORMS + (144 + 144) + (96 + 18 * 12) + 240 + 4 * 54),  # 1200
        ("bf16", "cpu", 0.1, NORMS + (72 + 72) + (48 + 18 * 6) + 120 + 2 * 54),  # 672
        ("fp16", "cpu", 0.1, NORMS + (72 + 72) + (48 + 18 * 6) + 120 + 2 * 54),
        # a fused kernel (CUDA, or no dropout): its log-sum-exp and the float padding mask, 8*h*T
        ("fp32", "cuda", 0.1, NORMS + (144 + 144) + 48 + 240 + 1 * 54),  # 774
        ("bf16", "cuda", 0.1, NORMS + (72 + 72) + 48 + 120 + 1 * 54),  # 510
        ("fp32", "cpu", 0.0, NORMS + (144 + 144) + 48 + 240),  # 720
        ("bf16", "cuda", 0.0, NORMS + (72 + 72) + 48 + 120),  # 528
    ],
)
def test_encoder_layer_bytes_by_hand(precision, device, dropout, expected):
    config = CFG.replace(dropout=dropout)
    assert mem.encoder_layer_activation_bytes(config, T, precision, device) == expected


def test_encoder_layer_defaults_are_fp32_on_cpu():
    assert mem.encoder_layer_activation_bytes(CFG, T) == 1200
    assert mem.checkpointed_layer_bytes(CFG, T) == 4 * T * 4 == 48


@pytest.mark.parametrize(
    ("config", "vocab", "precision", "device", "expected"),
    [
        # int64 indices 8*(3T + 3*neg + 1 + 2 + 1) = 8*22 = 176, padding mask T = 3; match lookups'
        # gap ids 8*2*(L + neg) = 80; token-dropout mask M*T*d
        (CFG, VOCAB, "fp32", "cpu", 176 + 3 + 80 + 4 * 12),
        (CFG, VOCAB, "bf16", "cpu", 176 + 3 + 80 + 2 * 12),
        (CFG, VOCAB, "bf16", "cuda", 176 + 3 + 80 + 1 * 12),
        # no skipped exposures: 8*(3T + 4) = 104, match ids 8*2*L = 32
        (CFG, PLAIN, "fp32", "cpu", 104 + 3 + 32 + 48),
        (CFG.replace(match_dim=0, dropout=0.0), PLAIN, "fp32", "cpu", 104 + 3),
    ],
)
def test_embedding_bytes_by_hand(config, vocab, precision, device, expected):
    assert mem.embedding_activation_bytes(config, vocab, precision, device) == expected


def test_embedding_bytes_default_precision_and_device():
    assert mem.embedding_activation_bytes(CFG, VOCAB) == 176 + 3 + 80 + 48


@pytest.mark.parametrize(
    ("precision", "device", "a", "m"),
    [("fp32", "cpu", 4, 4), ("bf16", "cuda", 2, 1), ("bf16", "cpu", 2, 2)],
)
def test_head_bytes_by_hand(precision, device, a, m):
    width = head_width(CFG, VOCAB)
    expected = (
        4 * T * 4
        + 8 * T
        + 4  # final norm (fp32 input, mean/rstd), the history count
        + a * width
        + a * 5 * 4  # MLP input; the dot products' operands
        + a * (3 * 4 + 2 * 3)
        + 2 * 3  # skipped exposures' tokens, scores, weights; mask
        + 2 * (2 + 3)  # one match mask per position, item and category
        + a * 2 * (1 + 4 * DENSE_FREQUENCIES)  # dense features: input, sin/cos, periodic
        + 2 * a * 6
        + m * 6  # hidden layer: activation input, next input; dropout
        + 2 * 4
    )  # logit, label
    assert mem.head_activation_bytes(CFG, VOCAB, precision, device) == expected


def test_head_bytes_without_optional_inputs():
    """No skipped exposures, no match features, no dense features, no head dropout, two layers."""
    config = CFG.replace(match_dim=0, head_dropout=0.0, mlp=(6, 5))
    width = head_width(config, PLAIN)
    expected = 4 * T * 4 + 8 * T + 4 + 4 * width + 4 * 5 * 4 + 2 * 4 * 6 + 2 * 4 * 5 + 2 * 4
    assert mem.head_activation_bytes(config, PLAIN) == expected
    # dense features without a periodic embedding keep nothing extra
    dense = dataclasses.replace(PLAIN, dense=2)
    flat = config.replace(dense_embed=0)
    assert mem.head_activation_bytes(flat, dense) == expected - 4 * width + 4 * head_width(
        flat, dense
    )


@pytest.mark.parametrize(
    ("precision", "device"), [("fp32", "cpu"), ("bf16", "cuda"), ("fp16", "cpu")]
)
def test_per_sample_activations_add_layers_embedding_and_head(precision, device):
    layer = mem.encoder_layer_activation_bytes(CFG, T, precision, device)
    head = mem.head_activation_bytes(CFG, VOCAB, precision, device)
    embedding = mem.embedding_activation_bytes(CFG, VOCAB, precision, device)
    assert mem.activation_bytes_per_sample(CFG, VOCAB, precision, False, device) == {
        "embedding": embedding,
        "dense": 3 * layer + head,
    }
    # checkpointing: every layer keeps its fp32 input (4*T*d = 48), one layer is recomputed whole
    assert mem.activation_bytes_per_sample(CFG, VOCAB, precision, True, device) == {
        "embedding": embedding,
        "dense": 3 * 48 + layer + head,
    }


def test_per_sample_activations_defaults():
    assert mem.activation_bytes_per_sample(CFG, VOCAB) == mem.activation_bytes_per_sample(
        CFG, VOCAB, "fp32", False, "cpu"
    )
    assert mem.activation_bytes_per_sample(CFG, VOCAB)[
        "dense"
    ] == 3 * 1200 + mem.head_activation_bytes(CFG, VOCAB)


def test_sparse_rows_count_skipped_exposures():
    assert mem.sparse_rows_per_sample(VOCAB) == (2 + 3 + 1, 1)


def _parts(embedding: int, dense: int) -> dict[str, int]:
    return {"embedding": embedding, "dense": dense, "total": embedding + dense}


@pytest.mark.parametrize("sparse", [True, False])
def test_breakdown_every_term_and_total_exactly(sparse):
    """Every term in its part, the four sums, and the setup's fields each reaching its term."""
    setup = mem.MemorySetup(
        CFG,
        VOCAB,
        micro_batch=5,
        grad_accum=2,
        world_size=3,
        precision="bf16",
        activation_checkpointing=True,
        sparse=sparse,
        device="cuda",
        num_workers=2,
        prefetch_factor=3,
        runtime_bytes=1_000,
        mapped_bytes=70_000,
        checkpoint_bytes=9_000,
    )
    params = mem.parameter_split(CFG, VOCAB)
    per = mem.activation_bytes_per_sample(CFG, VOCAB, "bf16", True, "cuda")
    b = mem.memory_breakdown(setup)
    terms = b["terms"]
    grads = mem.gradient_bytes(setup, params)
    buckets = mem.ddp_bucket_bytes(setup, params)
    expected = {
        "weights": _parts(4 * params["embedding"], 4 * params["dense"]),
        "gradients": _parts(grads["embedding"], grads["dense"]),
        "optimizer": _parts(8 * params["embedding"], 8 * params["dense"]),
        "autocast_copies": _parts(0, 2 * params["dense"]),
        "ddp_buckets": _parts(buckets["embedding"], buckets["dense"]),
        "activations": _parts(5 * per["embedding"], 5 * per["dense"]),
        "loader": _parts((1 + 2 * 3) * 5 * mem.batch_bytes_per_sample(VOCAB), 0),
        "workspace": _parts(
            0, int(0.1 * 5 * (per["embedding"] + per["dense"])) + mem.CUDA_WORKSPACE_BYTES
        ),
        "runtime": _parts(0, 1_000),
        "checkpoint_buffer": _parts(9_000, 0),
        "mapped_data": _parts(70_000, 0),
    }
    assert terms == expected
    assert buckets["embedding"] + buckets["dense"] == mem.DDP_BUCKET_BYTES  # world 3: one bucket
    assert b["activation_bytes_per_sample"] == _parts(per["embedding"], per["dense"])
    assert b["parameters"] == params

    def add(*names):
        return _parts(
            sum(expected[n]["embedding"] for n in names), sum(expected[n]["dense"] for n in names)
        )

    state = ("weights", "gradients", "optimizer", "autocast_copies", "ddp_buckets")
    assert b["model_state"] == add(*state)
    assert b["tensors"] == add(*state, "activations")
    total = (*state, "activations", "loader", "workspace", "runtime", "checkpoint_buffer")
    assert b["total"] == add(*total)
    assert b["resident"] == add(*total, "mapped_data")
    assert mem.total_bytes(setup) == b["total"]["total"]
    assert set(b) == {
        "terms",
        "activation_bytes_per_sample",
        "model_state",
        "tensors",
        "total",
        "resident",
        "parameters",
    }


def test_breakdown_in_fp32_has_no_autocast_copies():
    """Full precision keeps no low-precision working copies; bf16 keeps one of the dense weights."""
    params = mem.parameter_split(CFG, VOCAB)
    fp32 = mem.memory_breakdown(mem.MemorySetup(CFG, VOCAB, micro_batch=5))
    assert fp32["terms"]["autocast_copies"] == _parts(0, 0)
    bf16 = mem.memory_breakdown(mem.MemorySetup(CFG, VOCAB, micro_batch=5, precision="bf16"))
    assert bf16["terms"]["autocast_copies"] == _parts(0, 2 * params["dense"])
