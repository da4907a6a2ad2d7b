"""The estimate's time model: FLOPs, memory traffic and the latency floor of a step, the ring
all-reduce, validation and checkpoint writes, and the start-up, from a hardware profile's constants
(each names its source); and the checkpoint interval and patience that follow from the times.
"""

from __future__ import annotations

import math

from components.estimate.hardware import HardwareProfile
from components.estimate.memory import FP32, parameter_split
from components.train.model import DENSE_FREQUENCIES, ModelConfig, Vocab, head_width

OPTIMIZER_BYTES_PER_PARAM = 28  # AdamW: read param, grad, m, v; write param, m, v (fp32)
SPARSE_ROW_PASSES = (
    9  # gather, gradient write, SparseAdam: read grad, param, m, v; write param, m, v
)
DENSE_ROW_PASSES = 2  # gather, gradient scatter (the table's optimizer is in the dense update)
CHECKPOINT_BYTES_PER_PARAM = 12  # fp32 weight + AdamW/SparseAdam's two fp32 moments
MAX_PATIENCE = 3


def flops_per_sample(config: ModelConfig, vocab: Vocab, checkpointing: bool = False) -> float:
    """Training FLOPs of one sample: forward (2 per multiply-add) × 3 (forward + backward),
    × 4 with activation checkpointing (the encoder's forward runs again)."""
    t, d, f = vocab.seq_len + 1, config.d_model, config.ffn
    layer = t * 2 * (4 * d * d + 2 * d * f) + 2 * 2 * t * t * d  # projections + attention
    width, head = head_width(config, vocab), 0
    for hidden in (*config.mlp, 1):
        head += 2 * width * hidden
        width = hidden
    # the target's attention over the skipped exposures; the dense features' periodic embedding
    head += 2 * vocab.neg_len * d
    if vocab.dense and config.dense_embed:
        head += 2 * vocab.dense * 2 * DENSE_FREQUENCIES * config.dense_embed
    encoder = config.layers * layer
    return 3 * (encoder + head) + (encoder if checkpointing else 0)


def allreduce_seconds(
    grad_bytes: float, profile: HardwareProfile, nproc: int, nnodes: int
) -> float:
    """Ring all-reduce of the gradients once per optimizer step (2·(W-1)/W of the bytes) plus the
    profile's fixed synchronization latency."""
    world = nproc * nnodes
    if world <= 1:
        return 0.0
    bandwidth = (
        profile.inter_node_bandwidth_bytes_per_s
        if nnodes > 1
        else profile.intra_node_bandwidth_bytes_per_s
    )
    return 2 * (world - 1) / world * grad_bytes / bandwidth + profile.allreduce_latency_seconds


def embedding_bytes_per_sample(config: ModelConfig, vocab: Vocab, sparse: bool) -> float:
    """Memory traffic of one sample's embedding rows: every row looked up (item, category and gap
    per history token and target, user, the context pair) is gathered and its gradient written;
    sparse tables' rows are also updated in place by SparseAdam (param, m, v read and written)."""
    t = vocab.seq_len + 1
    rows = {
        "item": (t, config.d_model),
        "category": (t, config.d_model),
        "gap": (vocab.seq_len, config.d_model),
        "user": (1, config.user_width),
        "context": (2, config.context_dim),
    }
    total = 0.0
    for name, (count, width) in rows.items():
        passes = SPARSE_ROW_PASSES if sparse and name in ("item", "user") else DENSE_ROW_PASSES
        total += count * width * FP32 * passes
    return total


def time_model(
    *,
    profile: HardwareProfile,
    flops: float,
    micro_batch: int,
    grad_accum: int,
    nproc: int,
    nnodes: int,
    reduced_bytes: float,
    optimizer_params: int,
    embedding_bytes: float,
    steps_per_epoch: int,
    val_rows: int,
    checkpoint_bytes: float,
    max_epochs: int,
    max_lost_seconds: float,
    mfu: float,
    measured: dict | None = None,
) -> dict[str, float]:
    """Seconds of the whole training run, term by term.

    micro-step = max(compute, memory traffic, latency floor), or the probe's measured micro-step;
    step = grad_accum micro-steps / parallel efficiency (world > 1) + all-reduce (a probe run in
    this world size measured micro-steps that already include the all-reduce);
    epoch = steps x step + validation (forward only, every process its share) + checkpoint
    writes (the end-of-epoch ``last`` and ``best`` + the mid-epoch ones);
    total = start-up (the launched probe's measured one, else the profile's per-process
    constants + the probe's per-run setup; + pods, image pull) + epochs x epoch.
    """
    world = nproc * nnodes
    compute = micro_batch * flops / (profile.bf16_flops * mfu)
    bandwidth = profile.hbm_bandwidth_bytes_per_s * profile.memory_efficiency
    memory = (
        micro_batch * embedding_bytes + optimizer_params * OPTIMIZER_BYTES_PER_PARAM / grad_accum
    ) / bandwidth
    floor = profile.step_latency_seconds
    modelled = max(compute, memory, floor)
    micro = micro_batch / measured["samples_per_s"] if measured else modelled
    parallel = profile.parallel_efficiency if world > 1 else 1.0
    # a probe run in this world size already paid the all-reduce in every measured micro-step
    in_world = bool(measured) and measured.get("processes", 1) == world
    if in_world:
        parallel = 1.0
    comm = 0.0 if in_world else allreduce_seconds(reduced_bytes, profile, nproc, nnodes)
    step = grad_accum * micro / parallel + comm
    per_process_val = math.ceil(val_rows / world)
    if measured:
        validation = per_process_val / measured["eval_samples_per_s"]
    else:
        validation = per_process_val * (modelled / micro_batch) / profile.eval_speedup
    write = checkpoint_bytes / profile.checkpoint_write_bytes_per_s
    every = checkpoint_interval(steps_per_epoch * step, step, max_lost_seconds)
    mid_epoch_writes = steps_per_epoch // every if every else 0
    checkpoints = (2 + mid_epoch_writes) * write
    epoch = steps_per_epoch * step + validation + checkpoints
    if measured and "startup_seconds" in measured:  # the launched probe timed the whole start-up
        launch = measured["startup_seconds"]
    else:
        launch = (
            profile.startup_seconds
            + (nproc - 1) * profile.startup_seconds_per_process
            + (measured.get("setup_seconds", 0.0) if measured else 0.0)
        )
    startup = launch + profile.pod_startup_seconds + profile.image_pull_seconds
    return {
        "compute_seconds": compute,
        "memory_seconds": memory,
        "latency_floor_seconds": floor,
        "micro_step_seconds": micro,
        "bound": (
            "measured"
            if measured
            else max((compute, "compute"), (memory, "memory"), (floor, "latency"))[1]
        ),
        "allreduce_seconds": comm,
        "step_seconds": step,
        "validation_seconds": validation,
        "checkpoint_write_seconds": write,
        "checkpoint_every_steps": every,
        "checkpoint_seconds": checkpoints,
        "epoch_seconds": epoch,
        "startup_seconds": startup,
        "total_seconds": startup + max_epochs * epoch,
        "steps_per_epoch": steps_per_epoch,
    }


def checkpoint_interval(
    epoch_train_seconds: float, step_seconds: float, max_lost_seconds: float
) -> int:
    """Optimizer steps between mid-epoch ``last`` checkpoints so a preemption loses at most
    ``max_lost_seconds``; 0 when an epoch is that short (the per-epoch checkpoint suffices)."""
    if epoch_train_seconds <= max_lost_seconds:
        return 0
    return max(1, int(max_lost_seconds / max(step_seconds, 1e-9) * (1 + 1e-12)))


def choose_patience(max_epochs: int) -> int:
    """Epochs without a gain before stopping, so early stopping can act: a run whose best epoch is
    the first stops before ``max_epochs`` whenever max_epochs >= 3 (patience <= max_epochs - 2);
    1 for short daily schedules (click models tend to peak after one or two epochs and then
    overfit their ID embeddings), up to 3 for long ones."""
    return max(1, min(MAX_PATIENCE, (max_epochs - 1) // 2))


def world_candidates(profile: HardwareProfile) -> list[tuple[int, int]]:
    """(nproc_per_node, nnodes) to try in order. GPUs: increasing size (powers of two in a
    node, then whole nodes). CPU: one process per core first, then fewer (only used when the
    global batch is not divisible by the core count)."""
    if not profile.is_gpu:
        return [(n, 1) for n in range(profile.gpus_per_node, 0, -1)]
    out, n = [], 1
    while n < profile.gpus_per_node:
        out.append((n, 1))
        n *= 2
    out += [(profile.gpus_per_node, k) for k in range(1, profile.max_nodes + 1)]
    return out


def checkpoint_buffer_bytes(config: ModelConfig, vocab: Vocab) -> int:
    """Host bytes a checkpoint write holds at once: the serialized snapshot and its copy
    (save_checkpoint serializes to memory, then writes the buffer's bytes)."""
    return 2 * CHECKPOINT_BYTES_PER_PARAM * parameter_split(config, vocab)["total"]
