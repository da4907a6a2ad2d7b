"""CLI: ``python -m components.train --data DIR --plan plan.json --out DIR [--init-from CKPT] [--resume auto]``.

Runs as one process or under torchrun unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys

from components.common.cli import Exit, cli_parser
from components.train.trainer import (
    RESUME_MODES,
    TrainConfig,
    main_with_errors,
    read_summary,
    summary_line,
)


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.train",
        "Train the model on a preprocessed dataset, as one process or under torchrun.",
    )
    p.add_argument("--data", required=True, help="dataset folder (preprocess output)")
    p.add_argument(
        "--plan", default=None, help="plan.json (estimate output); default: a small CPU plan"
    )
    p.add_argument(
        "--out", required=True, help="output folder for checkpoints and train_summary.json"
    )
    p.add_argument(
        "--init-from",
        default=None,
        help="warm-start from this checkpoint when shapes match (default: none)",
    )
    p.add_argument(
        "--resume", choices=RESUME_MODES, default="never", help="auto: continue from OUT/last.pt"
    )
    p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI"),
        help="MLflow tracking URI (rank 0 logs there; default: $MLFLOW_TRACKING_URI, else none)",
    )
    p.add_argument("--experiment", default="dailyrec-train", help="MLflow experiment name")
    p.add_argument(
        "--max-epochs",
        type=int,
        default=None,
        help="override the plan's max_epochs (default: the plan's)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = TrainConfig(**vars(args))
    except ValueError as exc:
        print(f"train: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    code = main_with_errors(config)  # Exit.FAILED, or Exit.NO_SPACE on a full disk
    if code == Exit.OK and int(os.environ.get("RANK", 0)) == 0:
        print(summary_line(read_summary(config.out)))
    return code


if __name__ == "__main__":
    sys.exit(main())
