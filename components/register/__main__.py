"""CLI: ``python -m components.register --checkpoint FILE --metrics FILE --decision FILE
--model-name NAME [--tracking-uri URI] [--register-unblessed] [--out DIR] [--data DIR]
[--no-user-events]``."""

from __future__ import annotations

import argparse
import sys

from components.common.cli import Exit, cli_parser, exit_for, field_docs
from components.common.tracking import TrackingError
from components.register.integrity import IntegrityError
from components.register.stage import (
    ChampionMoved,
    RegisterConfig,
    default_tracking_uri,
    register,
    summary_line,
)
from components.train.checkpoint import CheckpointError


def build_parser() -> argparse.ArgumentParser:
    DOCS = field_docs(RegisterConfig)
    p = cli_parser(
        "python -m components.register",
        "Register an evaluated model in MLflow and move its aliases.",
    )
    p.add_argument(
        "--checkpoint", required=True, help="the evaluated checkpoint (train output best.pt)"
    )
    p.add_argument("--metrics", required=True, help="evaluate output metrics.json")
    p.add_argument("--decision", required=True, help="evaluate output decision.json")
    p.add_argument("--model-name", default="dailyrec", help=DOCS["model_name"])
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow URI (default $MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db)",
    )
    p.add_argument("--experiment", default="dailyrec-register", help=DOCS["experiment"])
    p.add_argument(
        "--register-unblessed",
        action="store_true",
        help="register a not-blessed model too, as @challenger",
    )
    p.add_argument("--pipeline-run-id", default="", help=DOCS["pipeline_run_id"])
    p.add_argument("--out", default=None, help="folder for registration.json (default: none)")
    p.add_argument(
        "--data",
        default=None,
        help="the dataset the model was trained on, whose snapshot it carries "
        "(default: the one evaluate names in metrics.json)",
    )
    p.add_argument(
        "--no-user-events",
        action="store_true",
        help="leave the users' window events out of the model (for windows too large to ship "
        "with it); requests must then send each user's events",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = RegisterConfig(
            checkpoint=args.checkpoint,
            metrics=args.metrics,
            decision=args.decision,
            model_name=args.model_name,
            tracking_uri=args.tracking_uri or default_tracking_uri(),
            experiment=args.experiment,
            register_unblessed=args.register_unblessed,
            pipeline_run_id=args.pipeline_run_id,
            out=args.out,
            data=args.data,
            user_events=not args.no_user_events,
        )
        result = register(config)
    except (
        CheckpointError,
        TrackingError,
        ChampionMoved,
        IntegrityError,
        ValueError,
        OSError,
    ) as exc:
        print(f"register: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(summary_line(result))
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
