"""One trial's files, shared by the in-process tuner and Katib trials.

A trial = a model config file in the tuned format (the base architecture with the trial's
``d_model``/``layers``/``dropout``, and a ``train`` block with its ``lr``, ``weight_decay``,
``warmup_fraction`` at the global batch) + the plan the estimate stage makes for that file,
fitted to the processes that actually run it. A trial therefore trains exactly as the daily
pipeline will train the winner.

As a CLI it is the entry point of a Katib trial's TrainJob (``torchrun --module
components.tune.trial``): it takes the trial's hyperparameters as flags, writes
``OUT/trial-config.json`` and ``OUT/trial-plan.json`` (every rank the same bytes, atomically)
and runs the trainer CLI (``components.train``) with every other flag unchanged, so the
trainer's per-epoch line ``epoch N/M ... val_auc X ...`` is what Katib's metrics collector
reads.

    torchrun --module components.tune.trial --data DIR --out DIR --base-model prod \\
        --hardware a100-40gb --global-batch 8192 --max-epochs 9 --lr 0.002 --weight-decay 1e-4 \\
        --warmup-fraction 0.05 --dropout 0.1 --d-model 64 --layers 2 [trainer flags ...]
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from components.common.cli import Exit, cli_parser, exit_for
from components.common.plan import MEMORY_FRACTION, TrainPlan, write_plan
from components.train.model import ModelConfig
from components.train.tuned import TunedTraining, write_tuned
from components.tune.space import trial_model

CONFIG_FILE = "trial-config.json"
PLAN_FILE = "trial-plan.json"


PLAN_PROBE = False
"""Trial plans skip the estimate stage's speed probe. The probe only times a plan (its shape comes
from the memory model, the same either way) and a trial runs on the processes it is given whatever
the timing says; a probe would cost each trial a launch (about 15 s on 2 cores), and under torchrun
every rank plans, so each would launch one onto the devices the trial is about to use."""


def write_trial_config(
    path: str | Path,
    name: str,
    base: ModelConfig,
    params: dict[str, Any],
    global_batch: int,
    search: dict[str, Any] | None = None,
) -> Path:
    """The trial's model config file (tuned format): base architecture + the trial's parameters."""
    train = TunedTraining(
        lr=float(params["lr"]),
        weight_decay=float(params["weight_decay"]),
        warmup_fraction=float(params["warmup_fraction"]),
        global_batch=global_batch,
    )
    return write_tuned(
        path, name, trial_model(base, params, name), train, {"params": params, **(search or {})}
    )


def for_world(plan: TrainPlan, nproc_per_node: int, nnodes: int = 1) -> TrainPlan:
    """The plan on ``nproc_per_node`` x ``nnodes`` processes, same global batch and micro-batch
    (accumulation absorbs the difference: the trainer computes the same large-batch gradient for
    any split, up to float rounding and dropout's random masks)."""
    world = nproc_per_node * nnodes
    if plan.global_batch % (plan.micro_batch * world):
        raise ValueError(
            f"global batch {plan.global_batch} is not a multiple of micro-batch "
            f"{plan.micro_batch} x {world} processes"
        )
    return plan.replace(
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        grad_accum=plan.global_batch // (plan.micro_batch * world),
    )


def write_trial_plan(
    path: str | Path,
    *,
    data: str,
    model_file: str | Path,
    hardware: str,
    global_batch: int,
    max_epochs: int,
    nproc_per_node: int,
    nnodes: int = 1,
    memory_fraction: float = MEMORY_FRACTION,
) -> tuple[Path, TrainPlan]:
    """The estimate stage's plan for the trial's config file, fitted to the processes running it
    (without the speed probe: :data:`PLAN_PROBE`)."""
    from components.estimate.planner import EstimateConfig, estimate

    doc = estimate(
        EstimateConfig(
            data=data,
            model=str(model_file),
            hardware=hardware,
            global_batch=global_batch,
            max_epochs=max_epochs,
            memory_fraction=memory_fraction,
            probe=PLAN_PROBE,
        )
    )
    plan = for_world(doc["train"], nproc_per_node, nnodes)
    rationale = dict(doc["rationale"])
    if (plan.nproc_per_node, plan.nnodes) != (doc["train"].nproc_per_node, doc["train"].nnodes):
        rationale["nproc_per_node"] = (
            f"{nproc_per_node} x {nnodes}: the processes this trial runs on "
            f"(accumulation {plan.grad_accum} keeps global batch {global_batch})"
        )
    return write_plan(path, plan, rationale, doc["estimate"]), plan


def write_trial(
    files: tuple[Path, Path],
    name: str,
    base: ModelConfig,
    params: dict[str, Any],
    search: dict[str, Any],
    settings: Any,
    nproc_per_node: int,
    nnodes: int = 1,
) -> tuple[Path, Path, TrainPlan]:
    """Write a trial's model config file and its plan to ``files`` (config, plan); return both
    paths and the plan. ``settings``: the search's data, hardware, global_batch, max_epochs and
    memory_fraction (a TuneConfig, or the trial CLI's flags of the same names)."""
    config_file, plan_file = files
    model_file = write_trial_config(config_file, name, base, params, settings.global_batch, search)
    plan_file, plan = write_trial_plan(
        plan_file,
        data=settings.data,
        model_file=model_file,
        hardware=settings.hardware,
        global_batch=settings.global_batch,
        max_epochs=settings.max_epochs,
        nproc_per_node=nproc_per_node,
        nnodes=nnodes,
        memory_fraction=settings.memory_fraction,
    )
    return model_file, plan_file, plan


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.tune.trial",
        "One hyperparameter trial (a Katib trial's entry point): write its model config and "
        "plan, then run the trainer. Other flags go to the trainer (python -m components.train).",
    )
    p.add_argument("--data", required=True, help="dataset folder (preprocess output)")
    p.add_argument(
        "--out", required=True, help="output folder of the trial (plan.json, checkpoints)"
    )
    p.add_argument("--base-model", default="prod", help="model config the trial varies")
    p.add_argument("--hardware", default="a100-40gb", help="hardware profile to plan for")
    p.add_argument(
        "--global-batch",
        type=int,
        default=8192,
        help="samples per optimizer step across all processes",
    )
    p.add_argument(
        "--max-epochs", type=int, required=True, help="epochs of this trial (its resource)"
    )
    p.add_argument(
        "--memory-fraction",
        type=float,
        default=MEMORY_FRACTION,
        help="share of the device memory the plan may use",
    )
    for name, kind in (
        ("lr", float),
        ("weight-decay", float),
        ("warmup-fraction", float),
        ("dropout", float),
        ("d-model", int),
        ("layers", int),
    ):
        p.add_argument(
            f"--{name}", type=kind, required=True, help=f"the trial's {name.replace('-', ' ')}"
        )
    return p


def main(argv: list[str] | None = None) -> int:
    args, trainer_args = build_parser().parse_known_args(argv)
    if any(a == "--plan" or a.startswith("--plan=") for a in trainer_args):
        print("trial: error: --plan is not taken: the trial plans its own config", file=sys.stderr)
        return Exit.USAGE
    rank = int(os.environ.get("RANK", 0))
    nproc = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    nnodes = max(1, int(os.environ.get("WORLD_SIZE", 1)) // nproc)
    params = {
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "warmup_fraction": args.warmup_fraction,
        "dropout": args.dropout,
        "d_model": args.d_model,
        "layers": args.layers,
    }
    out = Path(args.out)
    try:
        from components.train.model import model_config

        _, plan_file, plan = write_trial(
            (out / CONFIG_FILE, out / PLAN_FILE),
            f"trial-{out.name}",
            model_config(args.base_model),
            params,
            {"base_model": args.base_model},
            args,
            nproc,
            nnodes,
        )
    except ValueError as exc:
        print(f"trial: error (rank {rank}): {exc}", file=sys.stderr)
        return exit_for(exc)
    if rank == 0:
        print(
            f"trial {out.name}: "
            + "  ".join(f"{k}={v}" for k, v in params.items())
            + f"  (micro-batch {plan.micro_batch} x accum {plan.grad_accum} x {nproc * nnodes})",
            flush=True,
        )
    # the trainer's CLI runs as ``python -m components.train`` would run it (an entry point is
    # run, never imported): same flags, same exit code
    sys.argv = [
        "python -m components.train",
        "--data",
        args.data,
        "--out",
        args.out,
        "--plan",
        str(plan_file),
        "--max-epochs",
        str(args.max_epochs),
        *trainer_args,
    ]
    try:
        runpy.run_module("components.train", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else Exit.FAILED
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
