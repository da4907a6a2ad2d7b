"""Per-device training memory of the BST model, term by term (pure functions, bytes).

Every term is its own function so each can be tested alone; :func:`memory_breakdown`
adds them up and reports each separated into an ``embedding`` part (the
embedding tables, their gradients and optimizer state, the index tensors the
lookups save) and a ``dense`` part (encoder layers, final norm, MLP head).

What is modelled (what the trainer does, components/train/trainer.py and steps.py):

* weights: every parameter in fp32. Under bf16/fp16 autocast the fp32
  parameters ARE the master weights (autocast casts on the fly); the extra is
  the low-precision working copies of the dense layers' weights autocast keeps
  for the forward (:func:`autocast_copy_bytes`).
* gradients: fp32, full size for dense parameters and dense tables; sparse
  tables (SparseAdam, gloo/CPU) get COO gradients sized by the rows a step
  touches: per sample (L+1) item rows + 1 user row, each ``8 + 4·width`` bytes
  (int64 index + fp32 values), accumulated uncoalesced over ``grad_accum``
  micro-batches.
* optimizer state: AdamW keeps two fp32 moments per dense parameter; SparseAdam
  keeps two full-size fp32 moments per sparse table (its state is dense).
* DDP buckets: with world > 1, DDP holds the dense gradients once more in its
  flat ~25 MB buckets.
* activations: the bytes autograd saves for backward, per sample, as a function
  of tokens T = L+1, d_model, layers, heads, ffn, precision, dropout and
  checkpointing (:func:`activation_bytes_per_sample`).
* loader: the batches in flight (one in the step + workers × prefetch_factor);
  workspace: allocator slack and kernel scratch (10% of activations, plus
  256 MiB of CUDA workspace on GPUs).
* checkpoint buffer: on CPU a checkpoint write serializes the snapshot in memory
  and copies the bytes once (2 x weights and optimizer state) while training
  state is alive;
* runtime: what the process holds before any tensor (the hardware profile's
  measured ``process_baseline_bytes``: interpreter and libraries on CPU, the
  CUDA context on a GPU);
* mapped data: on CPU the dataset's memory-mapped training arrays, which an
  epoch reads whole and which then count in the process's resident memory
  (reported as ``resident``; not in the cap's ``total``: the kernel can drop them).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from components.train.model import (
    DENSE_FREQUENCIES,
    ModelConfig,
    Vocab,
    count_parameters,
    head_width,
)

INDEX_BYTES = 8  # int64 indices
FP32 = 4
DDP_BUCKET_BYTES = 25 * 1024 * 1024
CUDA_WORKSPACE_BYTES = 256 * 1024 * 1024
WORKSPACE_FRACTION = 0.10


@dataclass(frozen=True)
class MemorySetup:
    """What decides one training process's memory."""

    config: ModelConfig
    vocab: Vocab
    micro_batch: int
    grad_accum: int = 1
    world_size: int = 1
    precision: str = "fp32"
    """fp32 | bf16 | fp16."""
    activation_checkpointing: bool = False
    sparse: bool = True
    """Item/user tables sparse (SparseAdam; gloo/CPU) or dense (AdamW; NCCL)."""
    device: str = "cpu"
    """cpu | cuda: which attention and dropout kernels run (see activation_bytes_per_sample)."""
    num_workers: int = 0
    prefetch_factor: int = 4
    runtime_bytes: int = 0
    """The process before its tensors (hardware profile's process_baseline_bytes)."""
    mapped_bytes: int = 0
    """Memory-mapped dataset bytes resident in this process (CPU training: the train split)."""
    checkpoint_bytes: int = 0
    """Host bytes of a checkpoint write in the same memory (CPU training: serialized snapshot)."""

    def __post_init__(self) -> None:
        for name in ("micro_batch", "grad_accum", "world_size", "prefetch_factor"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be fp32, bf16 or fp16, got {self.precision!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")


# ----------------------------------------------------------------------------- parameters


def parameter_split(config: ModelConfig, vocab: Vocab) -> dict[str, int]:
    """Parameter counts: ``sparse_tables`` (item + user), ``other_tables`` (category, gap,
    position, hour, dow), ``dense`` (encoder, norm, head), ``embedding`` and ``total``."""
    return dict(_parameter_split(config, vocab))


@lru_cache(maxsize=256)
def _parameter_split(config: ModelConfig, vocab: Vocab) -> tuple[tuple[str, int], ...]:
    counts = count_parameters(config, vocab)
    return tuple(
        {
            "sparse_tables": counts["sparse"],
            "other_tables": counts["embedding"] - counts["sparse"],
            "dense": counts["dense"],
            "embedding": counts["embedding"],
            "total": counts["total"],
        }.items()
    )


def weight_bytes(params: dict[str, int]) -> dict[str, int]:
    """fp32 parameters (also the master weights under mixed precision)."""
    return {"embedding": FP32 * params["embedding"], "dense": FP32 * params["dense"]}


def sparse_rows_per_sample(vocab: Vocab) -> tuple[int, int]:
    """(item rows, user rows) one sample touches: L history + Ln skipped + 1 target item, 1 user."""
    return vocab.seq_len + vocab.neg_len + 1, 1


def sparse_gradient_bytes(
    config: ModelConfig, vocab: Vocab, micro_batch: int, grad_accum: int = 1
) -> int:
    """COO gradients of the sparse item/user tables: per touched row an int64 index and an fp32
    row; uncoalesced, so they grow with every accumulated micro-batch (not with the table)."""
    items, users = sparse_rows_per_sample(vocab)
    per_sample = items * (INDEX_BYTES + FP32 * config.d_model) + users * (
        INDEX_BYTES + FP32 * config.user_width
    )
    return per_sample * micro_batch * grad_accum


def gradient_bytes(setup: MemorySetup, params: dict[str, int]) -> dict[str, int]:
    """fp32 gradients: dense parameters and dense tables full size; sparse tables per batch."""
    if setup.sparse:
        embedding = FP32 * params["other_tables"] + sparse_gradient_bytes(
            setup.config, setup.vocab, setup.micro_batch, setup.grad_accum
        )
    else:
        embedding = FP32 * params["embedding"]
    return {"embedding": embedding, "dense": FP32 * params["dense"]}


def optimizer_bytes(params: dict[str, int]) -> dict[str, int]:
    """Two fp32 moments per parameter: AdamW for dense parameters and dense tables; SparseAdam's
    moments of the sparse tables are full-size dense tensors too."""
    return {"embedding": 2 * FP32 * params["embedding"], "dense": 2 * FP32 * params["dense"]}


def autocast_copy_bytes(precision: str, params: dict[str, int]) -> dict[str, int]:
    """Low-precision working copies of the dense layers' weights under autocast (fp32: none)."""
    return {"embedding": 0, "dense": 0 if precision == "fp32" else 2 * params["dense"]}


def ddp_bucket_bytes(setup: MemorySetup, params: dict[str, int]) -> dict[str, int]:
    """DDP's flat gradient buckets (world > 1): every densely reduced gradient once more,
    rounded up to whole ~25 MB buckets. Sparse gradients are not bucketed."""
    if setup.world_size <= 1:
        return {"embedding": 0, "dense": 0}
    embedding = FP32 * (params["other_tables"] if setup.sparse else params["embedding"])
    dense = FP32 * params["dense"]
    total = embedding + dense
    rounded = -(-total // DDP_BUCKET_BYTES) * DDP_BUCKET_BYTES
    # report the rounding with the bigger part
    if embedding >= dense:
        embedding += rounded - total
    else:
        dense += rounded - total
    return {"embedding": embedding, "dense": dense}


# ----------------------------------------------------------------------------- activations


def _act_bytes(precision: str) -> int:
    return FP32 if precision == "fp32" else 2


def _mask_bytes(precision: str, device: str) -> int:
    """Bytes per element a dropout keeps for backward: CUDA keeps a bool mask; the CPU kernel
    multiplies by a noise tensor of the input's dtype and keeps that."""
    return 1 if device == "cuda" else _act_bytes(precision)


def encoder_layer_activation_bytes(
    config: ModelConfig, tokens: int, precision: str = "fp32", device: str = "cpu"
) -> int:
    """Bytes one pre-norm encoder layer saves for backward, per sample.

    T tokens, d = d_model, f = ffn, h = heads; R = 4 (the residual stream and the
    layer norms stay fp32 under autocast), A = activation bytes (4 fp32, 2 bf16),
    M = dropout mask bytes:

    * norm1, norm2: input R·T·d + mean/rstd 8·T each;
    * the inputs of in_proj, out_proj and linear1: A·T·d each; packed q, k, v: 3·A·T·d;
    * attention: with dropout on CPU the math kernel runs and keeps scaled q and k
      (2·A·T·d), the softmax output, the dropout noise and the dropped
      probabilities (h·T²·(2A + M)); otherwise a fused kernel keeps its output
      (A·T·d, shared with out_proj's input: counted once), the log-sum-exp (4·h·T) and
      the expanded float padding mask (4·h·T);
    * feed-forward: GELU input and linear2 input A·T·f each;
    * dropout (p > 0): masks after attention and after the feed-forward (M·T·d each)
      and inside it (M·T·f).
    """
    t, d, f, h = tokens, config.d_model, config.ffn, config.heads
    a, m, r = _act_bytes(precision), _mask_bytes(precision, device), FP32
    dropout = config.dropout > 0
    total = 2 * (r * t * d + 8 * t)  # norm1, norm2
    total += 3 * a * t * d + 3 * a * t * d  # in_proj/out_proj/linear1 inputs; q, k, v
    if dropout and device == "cpu":
        total += 2 * a * t * d + h * t * t * (2 * a + m)
    else:  # the fused output is laid out [B, T, h, hd]: out_proj's input is a view of it
        total += 8 * h * t
    total += 2 * a * t * f  # GELU input, linear2 input
    if dropout:
        total += m * (2 * t * d + t * f)
    return total


def checkpointed_layer_bytes(config: ModelConfig, tokens: int) -> int:
    """What a checkpointed layer keeps until backward: its fp32 input (T·d·4)."""
    return FP32 * tokens * config.d_model


def embedding_activation_bytes(
    config: ModelConfig, vocab: Vocab, precision: str = "fp32", device: str = "cpu"
) -> int:
    """Per sample: the int64 indices the lookups keep (item, category, gap per token and per
    skipped exposure; user; the context pair; the match lookups' gap ids), the padding mask (T
    bools) and the token-dropout mask."""
    t = vocab.seq_len + 1
    sequences = vocab.seq_len + vocab.neg_len
    total = INDEX_BYTES * (3 * t + 3 * vocab.neg_len + 1 + 2 + 1) + t  # +1: target category
    if config.match_dim:
        total += INDEX_BYTES * 2 * sequences
    if config.dropout > 0:
        total += _mask_bytes(precision, device) * t * config.d_model
    return total


def head_activation_bytes(
    config: ModelConfig, vocab: Vocab, precision: str = "fp32", device: str = "cpu"
) -> int:
    """Per sample: the final norm (fp32 input + mean/rstd), the MLP inputs, GELU inputs and
    dropout masks, the history count, the logit and the label; the dot products' operands; the
    skipped exposures' tokens, scores and weights; the match vectors and masks; the dense
    features' periodic embedding."""
    a, m = _act_bytes(precision), _mask_bytes(precision, device)
    tokens, d, negatives = vocab.seq_len + 1, config.d_model, vocab.neg_len
    total = FP32 * tokens * d + 8 * tokens + FP32  # final norm; the count
    total += a * head_width(config, vocab) + a * 5 * d  # MLP input; dot-product operands
    if negatives:  # tokens, scores and weights; the valid mask
        total += a * (negatives * d + 2 * negatives) + 2 * negatives
    if config.match_dim:  # one match mask per position, for item and for category
        total += 2 * (vocab.seq_len + negatives)
    if vocab.dense and config.dense_embed:  # standardized input, angles (sin, cos), periodic
        total += a * vocab.dense * (1 + 4 * DENSE_FREQUENCIES)
    for hidden in config.mlp:
        total += 2 * a * hidden  # activation input; next linear's input
        if config.head_dropout_rate > 0:
            total += m * hidden
    return total + 2 * FP32  # logit, label


def activation_bytes_per_sample(
    config: ModelConfig,
    vocab: Vocab,
    precision: str = "fp32",
    checkpointing: bool = False,
    device: str = "cpu",
) -> dict[str, int]:
    """Saved-for-backward bytes per sample, {"embedding", "dense"}.

    With checkpointing every layer keeps only its input, and one layer's full
    activations exist again while it is recomputed in backward.
    """
    t = vocab.seq_len + 1
    layer = encoder_layer_activation_bytes(config, t, precision, device)
    if checkpointing:
        encoder = config.layers * checkpointed_layer_bytes(config, t) + layer
    else:
        encoder = config.layers * layer
    return {
        "embedding": embedding_activation_bytes(config, vocab, precision, device),
        "dense": encoder + head_activation_bytes(config, vocab, precision, device),
    }


def batch_bytes_per_sample(vocab: Vocab) -> int:
    """One training row as the loader delivers it (int64 ids, fp32 count features and label)."""
    ids = (
        3 * vocab.seq_len + 3 * vocab.neg_len + 2 + 3 + 2
    )  # sequences, lengths, target, user, context
    return INDEX_BYTES * ids + FP32 * (vocab.dense + 1)


def loader_bytes(setup: MemorySetup) -> int:
    """Batches in flight in the training process: the current one plus workers × prefetch."""
    in_flight = 1 + setup.num_workers * setup.prefetch_factor
    return in_flight * setup.micro_batch * batch_bytes_per_sample(setup.vocab)


def workspace_bytes(setup: MemorySetup, activations: int) -> int:
    """Allocator slack and kernel scratch: 10% of activations (+256 MiB CUDA workspace)."""
    return int(WORKSPACE_FRACTION * activations) + (
        CUDA_WORKSPACE_BYTES if setup.device == "cuda" else 0
    )


def _sum_parts(*parts: dict[str, int]) -> dict[str, int]:
    return {
        "embedding": sum(p["embedding"] for p in parts),
        "dense": sum(p["dense"] for p in parts),
    }


def memory_breakdown(setup: MemorySetup) -> dict[str, Any]:
    """Every term in bytes ({"embedding", "dense", "total"} each) and the totals.

    ``model_state`` = weights + gradients + optimizer + autocast copies + DDP buckets;
    ``tensors`` = model_state + activations (what the probe measures on CPU);
    ``total`` = tensors + loader + workspace + runtime + checkpoint buffer (what the plan must fit
    under the cap);
    ``resident`` = total + the mapped dataset pages, what a CPU process's peak RSS shows (the
    kernel can drop those pages under pressure, so they do not count against the cap).
    """
    params = parameter_split(setup.config, setup.vocab)
    per_sample = activation_bytes_per_sample(
        setup.config, setup.vocab, setup.precision, setup.activation_checkpointing, setup.device
    )
    terms = {
        "weights": weight_bytes(params),
        "gradients": gradient_bytes(setup, params),
        "optimizer": optimizer_bytes(params),
        "autocast_copies": autocast_copy_bytes(setup.precision, params),
        "ddp_buckets": ddp_bucket_bytes(setup, params),
        "activations": {k: v * setup.micro_batch for k, v in per_sample.items()},
    }
    activations = sum(terms["activations"].values())
    terms["loader"] = {"embedding": loader_bytes(setup), "dense": 0}
    terms["workspace"] = {"embedding": 0, "dense": workspace_bytes(setup, activations)}
    terms["runtime"] = {"embedding": 0, "dense": setup.runtime_bytes}
    terms["checkpoint_buffer"] = {"embedding": setup.checkpoint_bytes, "dense": 0}
    terms["mapped_data"] = {"embedding": setup.mapped_bytes, "dense": 0}
    for part in terms.values():
        part["total"] = part["embedding"] + part["dense"]
    state = _sum_parts(
        *(terms[k] for k in ("weights", "gradients", "optimizer", "autocast_copies", "ddp_buckets"))
    )
    tensors = _sum_parts(state, terms["activations"])
    total = _sum_parts(
        tensors, terms["loader"], terms["workspace"], terms["runtime"], terms["checkpoint_buffer"]
    )
    resident = _sum_parts(total, terms["mapped_data"])
    return {
        "terms": terms,
        "activation_bytes_per_sample": {**per_sample, "total": sum(per_sample.values())},
        "model_state": {**state, "total": state["embedding"] + state["dense"]},
        "tensors": {**tensors, "total": tensors["embedding"] + tensors["dense"]},
        "total": {**total, "total": total["embedding"] + total["dense"]},
        "resident": {**resident, "total": resident["embedding"] + resident["dense"]},
        "parameters": params,
    }


def total_bytes(setup: MemorySetup) -> int:
    """Peak bytes of one training process (the ``total`` of :func:`memory_breakdown`)."""
    return memory_breakdown(setup)["total"]["total"]
