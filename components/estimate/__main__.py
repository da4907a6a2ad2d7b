"""CLI of the estimate stage: ``python -m components.estimate --data DIR --model NAME
--hardware PROFILE [--global-batch B] [--deadline-hours H] [--[no-]probe] --out plan.json``."""

from __future__ import annotations

import argparse
import sys

from components.common.cli import Exit, cli_parser, exit_for
from components.estimate.hardware import HardwareError, available_profiles
from components.estimate.planner import (
    EstimateConfig,
    EstimateError,
    estimate_and_write,
    plan_table,
)
from components.train.data import DatasetError


def main(argv: list[str] | None = None) -> int:
    p = cli_parser(
        "python -m components.estimate",
        "Write a training plan (plan.json) for a model, dataset and hardware.",
    )
    p.add_argument("--data", required=True, help="preprocessed dataset folder (meta.json)")
    p.add_argument("--model", default="debug", help="named model config: debug | local | prod")
    p.add_argument(
        "--hardware",
        default="cpu-local",
        help=f"profile name ({', '.join(available_profiles())}) or a JSON file",
    )
    p.add_argument(
        "--global-batch",
        type=int,
        default=1024,
        help="samples per optimizer step across all processes (default 1024)",
    )
    p.add_argument(
        "--deadline-hours",
        type=float,
        default=None,
        help="wall-clock hours the training may take, start-up included (default: none)",
    )
    p.add_argument(
        "--deadline-margin",
        type=float,
        default=0.15,
        help="headroom a plan keeps for the time model's error: predicted x (1 + margin) must fit "
        "the deadline (default 0.15)",
    )
    p.add_argument(
        "--max-epochs",
        type=int,
        default=3,
        help="epochs at most; the time estimate assumes all of them (default 3)",
    )
    p.add_argument(
        "--patience",
        type=int,
        default=None,
        help="epochs without a validation gain before stopping (default: chosen so early "
        "stopping can act within --max-epochs)",
    )
    p.add_argument(
        "--max-lost-minutes",
        type=float,
        default=10.0,
        help="most minutes of training a preemption may lose: sizes mid-epoch checkpoints (default 10)",
    )
    p.add_argument(
        "--memory-fraction",
        type=float,
        default=0.88,
        help="share of the device memory the plan may use (default 0.88)",
    )
    p.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time real training steps on this machine's slice of the data and measure memory "
        "(default: time them where the profile's hardware is present)",
    )
    p.add_argument("--out", required=True, help="where to write plan.json")
    args = p.parse_args(argv)
    try:
        config = EstimateConfig(
            data=args.data,
            model=args.model,
            hardware=args.hardware,
            global_batch=args.global_batch,
            deadline_hours=args.deadline_hours,
            deadline_margin=args.deadline_margin,
            probe=args.probe,
            max_epochs=args.max_epochs,
            patience=args.patience,
            max_lost_minutes=args.max_lost_minutes,
            memory_fraction=args.memory_fraction,
        )
        path, doc = estimate_and_write(config, args.out)
    except (EstimateError, HardwareError, DatasetError) as exc:
        print(f"estimate: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:  # e.g. --out in a folder that cannot be created
        print(f"estimate: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(plan_table(doc))
    print(f"plan written to {path}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
