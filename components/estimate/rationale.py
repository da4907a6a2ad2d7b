"""Why each setting of a plan is what it is: the plan's ``rationale``, one line per setting, and
the notes on its throughput, cost and share of negatives that the plan's ``estimate`` block
repeats."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from components.estimate.table import duration, gb

if TYPE_CHECKING:
    from components.estimate.planner import Candidate, Planner


def rationale(planner: Planner, c: Candidate) -> dict[str, str]:
    """Why each setting of the plan is what it is, one line each."""
    return {**_shape(planner, c), **_schedule(planner, c), **_runtime(planner, c)}


def _shape(planner: Planner, c: Candidate) -> dict[str, str]:
    """The model, its batch and where it runs."""
    config, profile, params, gpu = planner.config, planner.profile, planner.params, planner.gpu
    return {
        "model": f"{config.model}: {params['total']:,} parameters ({params['embedding']:,} embedding, "
        f"{params['dense']:,} dense) at the dataset's vocab",
        "micro_batch": f"largest power of two that divides the per-process batch and fits: peak "
        f"{gb(c.breakdown['total']['total'])} <= cap {gb(planner.cap)} ({config.memory_fraction:.0%} "
        f"of {gb(profile.memory_bytes)})",
        "grad_accum": f"{config.global_batch} global = {c.micro} micro x {c.accum} accum x {c.world} processes",
        "nproc_per_node": (
            f"fewest devices finishing {config.max_epochs} epochs in {config.deadline_hours:g} h"
            if planner.deadline_s and gpu
            else "one GPU (no deadline given)"
            if gpu
            else "one process per core, 1 intra-op thread each (docs/tuning.md: one intra-op "
            "thread per CPU process)"
            if c.nproc == profile.gpus_per_node
            else f"{c.nproc} processes: the largest count <= {profile.gpus_per_node} cores "
            f"that divides global batch {config.global_batch}"
        ),
        "nnodes": f"{c.nnodes} of at most {profile.max_nodes} in the {profile.name} pool",
        "precision": (
            "bf16 autocast: the profile supports it"
            if planner.precision == "bf16"
            else "fp32: no bf16 training on this device"
        ),
        "activation_checkpointing": (
            "on: micro-batch 1 does not fit without it"
            if c.checkpointing
            else "off: the model fits without recomputation"
        ),
        "sparse_embeddings": (
            "auto: dense tables with NCCL (it cannot reduce sparse gradients)"
            if gpu
            else "auto: sparse item/user tables with gloo (SparseAdam)"
        ),
    }


def _schedule(planner: Planner, c: Candidate) -> dict[str, str]:
    """What the training sees and when it stops or saves."""
    config, t, training, patience = planner.config, c.times, planner.training, planner.patience
    return {
        "lr": f"{training.lr:g} x {config.global_batch}/{training.global_batch} (linear scaling), "
        f"{training.warmup_fraction:.0%} warmup"
        + (
            f", weight decay {training.weight_decay:g}: tuned settings of {config.model}"
            if planner.from_file
            else ""
        ),
        "max_epochs": f"{config.max_epochs} epochs at most; the time estimate assumes all of them",
        "negative_keep": negative_note(planner),
        "patience": (
            f"{patience}: "
            + (
                f"early stopping can end the run after epoch {patience + 1} of "
                f"{config.max_epochs} when the first epoch stays the best"
                if 0 < patience <= config.max_epochs - 2
                else "early stopping cannot end this run before max_epochs"
            )
            + (
                " (given)"
                if config.patience is not None
                else " (1 for short schedules: click models tend to peak after one or two epochs)"
            )
        ),
        "checkpoint_every_steps": (
            f"{t['checkpoint_every_steps']}: at most {config.max_lost_minutes:g} min of training lost to a "
            f"preemption ({t['step_seconds']:.3g} s per step; each write ~{t['checkpoint_write_seconds']:.2g} s)"
            if t["checkpoint_every_steps"]
            else f"0: an epoch's training ({t['steps_per_epoch'] * t['step_seconds']:,.0f} s) is under "
            f"{config.max_lost_minutes:g} min, the per-epoch checkpoint bounds the loss"
        ),
    }


def _runtime(planner: Planner, c: Candidate) -> dict[str, str]:
    """How the processes run, how fast, at what cost."""
    config, profile, t, gpu = planner.config, planner.profile, c.times, planner.gpu
    num_workers = planner.num_workers
    return {
        "num_workers": (
            f"{num_workers} loader workers: {profile.cpu_cores_per_gpu} CPU cores per GPU, "
            f"one left for the training process"
            if gpu
            else "0 loader workers: on CPU the cores train (docs/tuning.md)"
        ),
        "cpu_threads": "1 intra-op thread per process: CPU training scales with processes (docs/tuning.md)",
        "compile": (
            "reduce-overhead: torch.compile's fused kernels and CUDA graphs, a step replayed as "
            "one launch (eager GPU steps are launch-bound: benchmarks/results/gpu.json)"
            if gpu
            else "off: compiling the CPU step measured no gain (docs/performance.md)"
        ),
        "throughput": rate_note(planner, c),
        "cost": cost_note(planner, c),
        "time": (
            f"start-up {t['startup_seconds']:,.0f} s + {config.max_epochs} x ({t['steps_per_epoch']:,} "
            f"steps x {t['step_seconds']:.3g} s + validation {t['validation_seconds']:,.1f} s + "
            f"checkpoints {t['checkpoint_seconds']:,.1f} s) = {duration(t['total_seconds'])}; constants "
            f"from {profile.source}"
        ),
    }


def negative_note(planner: Planner) -> str:
    """Why the plan trains on the share of negatives it does."""
    config, keep = planner.config, planner.negative_keep
    split = planner.meta.split("train")
    positives, negatives = split.label_counts
    limit = config.negatives_per_positive
    if keep >= 1:
        return "1: every training row" + (
            f" (the split has {negatives / max(positives, 1):.2g} negatives per positive, "
            f"the limit {limit:g})"
            if limit
            else ""
        )
    why = (
        f"at most {limit:g} negatives per positive: {negatives:,} negatives, {positives:,} positives"
        if keep < config.negative_keep
        else f"negative_keep {keep:g}"
    )
    return (
        f"{keep:g} ({why}): each epoch trains on every positive and a new draw of that share "
        f"of the negatives ({planner.train_rows:,} of {split.rows:,} rows); the model "
        f"adds log({keep:g}) = {math.log(keep):+.3f} to its logits to stay calibrated"
    )


def rate_note(planner: Planner, c: Candidate) -> str:
    speed, t, profile = planner.speed, c.times, planner.profile
    if speed:
        return (
            f"probe-measured on this machine: {speed['samples_per_s']:,.0f} samples/s per process "
            f"(micro-batch {speed['micro_batch']}, real rows), validation "
            f"{speed['eval_samples_per_s']:,.0f} rows/s"
        )
    return (
        f"modelled: micro-step bound by {t['bound']} ({c.flops / 1e6:.2f} MFLOP/sample at MFU "
        f"{planner.mfu:.3g} of {profile.bf16_flops / 1e12:g} TFLOP/s; latency floor "
        f"{profile.step_latency_seconds * 1e3:g} ms)"
        + (f"; not probed: {planner.unprobed}" if planner.unprobed else "")
    )


def cost_note(planner: Planner, c: Candidate) -> str:
    cost = planner.cost(c)
    if not planner.priced:
        return f"not priced: {planner.profile.name} sets no price (hardware.py: PRICE_FIELDS)"
    note = (
        f"${cost['usd']:,.2f}: {cost['device_hours']:,.2f} device-hours at "
        f"${cost['usd_per_hour']:,.2f}/h ({planner.profile.price_source}, {planner.profile.price_date})"
    )
    if planner.gpu and planner.deadline_s is not None:
        cheaper = cost["next_cheaper"]
        note += "; the cheapest plan that meets the deadline" + (
            f": the next cheaper, {cheaper['nproc_per_node']} per node x {cheaper['nnodes']} "
            f"(${cheaper['usd']:,.2f}), would miss it by "
            f"{cheaper['misses_deadline_by_seconds'] / 60:,.1f} min"
            if cheaper
            else ""
        )
    return note
