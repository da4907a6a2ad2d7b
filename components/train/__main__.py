"""CLI: ``python -m components.train --data DIR --plan plan.json --out DIR [--init-from CKPT] [--resume auto]``.

Runs as one process or under torchrun unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys

from components.common.cli import Exit, add_config_flags, cli_parser
from components.common.stop import run_main
from components.train.config import TrainConfig


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.train",
        "Train the model on a preprocessed dataset, as one process or under torchrun.",
    )
    add_config_flags(p, TrainConfig, skip=("tracking_uri",))
    # hand-written: its default comes from the environment and is not shown (it may hold a password)
    p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI"),
        help="MLflow tracking URI (rank 0 logs there; default: $MLFLOW_TRACKING_URI, else none)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = TrainConfig(**vars(args))
    except ValueError as exc:
        print(f"train: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    from components.common.train_summary import TrainSummary
    from components.train.trainer import main_with_errors

    code = main_with_errors(config)  # Exit.FAILED, or Exit.NO_SPACE on a full disk
    if code == Exit.OK and int(os.environ.get("RANK", 0)) == 0:
        print(TrainSummary.read(config.out).line())
    return code


if __name__ == "__main__":
    sys.exit(run_main("train", main))
