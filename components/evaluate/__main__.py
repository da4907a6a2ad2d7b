"""CLI: ``python -m components.evaluate --data DIR --checkpoint FILE --model-name NAME --out DIR
[--tracking-uri URI] [--min-auc X] [--tolerance T] [--max-feature-shift S] ...``: one flag per
field of :class:`~components.evaluate.stage.EvaluateConfig`, of its :class:`GateRule` and of its
:class:`GuardRule`.

Exits 0 whether or not the candidate is blessed (the verdict is in decision.json); otherwise
with a one-line reason and the status of :class:`~components.common.cli.Exit`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for
from components.common.stop import run_main
from components.common.tracking import TrackingError
from components.evaluate.config import EvaluateConfig
from components.evaluate.decision import GateRule
from components.evaluate.guards import GuardRule


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.evaluate",
        "Score a candidate checkpoint on the test split, compare it with the "
        "registered champion and decide whether it is blessed.",
    )
    add_config_flags(p, EvaluateConfig, skip=("rule", "guards", "tracking_uri"))
    add_config_flags(p, GateRule)  # the rule's fields are flags of their own
    add_config_flags(p, GuardRule)  # and the guards' thresholds
    # hand-written: its default comes from the environment and is not shown (it may hold a password)
    p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI"),
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI; none = no champion)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    # after parsing: --help and a bad flag answer without importing torch
    from components.common.dataset import DatasetError
    from components.evaluate.stage import EvaluateError, evaluate
    from components.train.checkpoint import CheckpointError

    try:
        rule, guards = (
            kind(**{f.name: args.pop(f.name) for f in dataclasses.fields(kind)})
            for kind in (GateRule, GuardRule)
        )
        config = EvaluateConfig(**args, rule=rule, guards=guards)
        result = evaluate(config)
    except (
        EvaluateError,
        DatasetError,
        CheckpointError,
        TrackingError,
        ValueError,
        OSError,
    ) as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(result.line())
    print(f"outputs in {config.out}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(run_main("evaluate", main))
