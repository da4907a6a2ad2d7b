"""The plan as a person reads it: one table of the choices, memory, times and cost, then the
rationale.
"""

from __future__ import annotations

from typing import Any

from components.common.plan import TrainPlan


def gb(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"


def plan_table(doc: dict[str, Any]) -> str:
    """A readable summary of a plan document."""
    plan: TrainPlan = doc["train"]
    est = doc["estimate"]
    mem = est["memory"]
    rows = [
        ("model", plan.model),
        ("hardware", est["hardware"]["name"]),
        ("world", f"{plan.nproc_per_node} per node x {plan.nnodes} nodes = {plan.world_size}"),
        (
            "micro_batch x accum",
            f"{plan.micro_batch} x {plan.grad_accum} (global {plan.global_batch})",
        ),
        ("precision", plan.precision),
        ("activation ckpt", str(plan.activation_checkpointing)),
        ("sparse_embeddings", plan.sparse_embeddings),
        ("compile", plan.compile),
        ("lr / warmup", f"{plan.lr:g} / {plan.warmup_fraction:.0%}"),
        ("loader workers", str(plan.num_workers)),
        ("max_epochs / patience", f"{plan.max_epochs} / {plan.patience}"),
        (
            "negatives kept",
            f"{plan.negative_keep:g} ({est['dataset']['train_rows']:,} rows an epoch)",
        ),
        (
            "checkpoint every",
            f"{plan.checkpoint_every_steps} steps" if plan.checkpoint_every_steps else "epoch",
        ),
        ("peak memory", f"{gb(mem['total']['total'])} of cap {gb(mem['cap_bytes'])}"),
    ]
    for term, part in mem["terms"].items():
        rows.append(
            (
                f"  {term}",
                f"{gb(part['total'])} (embedding {gb(part['embedding'])}, "
                f"dense {gb(part['dense'])})",
            )
        )
    t = est["times"]
    rows += [
        ("samples/s", f"{est['throughput']['samples_per_s']:,.0f} ({est['throughput']['source']})"),
        (
            "step / epoch",
            f"{t['step_seconds'] * 1000:.2f} ms / {duration(t['epoch_seconds'])} "
            f"(validation {duration(t['validation_seconds'])}, checkpoints "
            f"{duration(t['checkpoint_seconds'])})",
        ),
        ("start-up", duration(t["startup_seconds"])),
        (f"{t['epochs_assumed']} epochs", duration(t["total_seconds"])),
    ]
    cost = est.get("cost") or {}
    if cost.get("usd_per_hour"):
        rows.append(
            (
                "cost",
                f"${cost['usd']:,.2f} ({cost['device_hours']:,.2f} device-hours at "
                f"${cost['usd_per_hour']:,.2f}/h, prices of {cost['price_date']})",
            )
        )
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines += ["", "rationale:"] + [f"  {k}: {v}" for k, v in doc["rationale"].items()]
    return "\n".join(lines)
