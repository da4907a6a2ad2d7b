"""CLI: ``python -m components.register --checkpoint FILE --metrics FILE --decision FILE
--model-name NAME [--tracking-uri URI] [--register-unblessed] [--out DIR] [--data DIR]
[--no-user-state]``."""

from __future__ import annotations

import argparse
import sys

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for
from components.common.integrity import IntegrityError
from components.common.stop import run_main
from components.common.tracking import TrackingError, default_tracking_uri
from components.register.config import RegisterConfig
from components.register.stage import ChampionMoved, register


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.register",
        "Register an evaluated model in MLflow and move its aliases.",
    )
    add_config_flags(p, RegisterConfig, skip=("tracking_uri", "user_state"))
    # hand-written: the default is resolved at run time (and not shown: it may hold a password)
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow URI (default $MLFLOW_TRACKING_URI, else sqlite:///runs/mlflow.db)",
    )
    # hand-written: the field defaults to True, so its flag is the switch that turns it off
    p.add_argument(
        "--no-user-state",
        dest="user_state",
        action="store_false",
        help="leave the users' window events out of the model (for windows too large to ship "
        "with it); requests must then send each user's events (default: they are carried)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    from components.train.checkpoint import CheckpointError  # after parsing: no torch for --help

    try:
        config = RegisterConfig(
            **args | {"tracking_uri": args["tracking_uri"] or default_tracking_uri()}
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
    print(result.line())
    return Exit.OK


if __name__ == "__main__":
    sys.exit(run_main("register", main))
