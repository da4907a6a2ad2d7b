"""CLI: ``python -m components.evaluate --data DIR --checkpoint FILE --model-name NAME --out DIR
[--tracking-uri URI] [--min-auc X] [--tolerance T]``.

Exits 0 whether or not the candidate is blessed (the verdict is in decision.json); otherwise
with a one-line reason and the status of :class:`~components.common.cli.Exit`.
"""

from __future__ import annotations

import argparse
import os
import sys

from components.common.cli import Exit, cli_parser, exit_for, field_docs
from components.common.tracking import TrackingError
from components.evaluate.decision import UNUSABLE_POLICIES, GateRule
from components.evaluate.stage import EvaluateConfig, EvaluateError, evaluate, summary_line
from components.train.checkpoint import CheckpointError
from components.train.data import DatasetError


def build_parser() -> argparse.ArgumentParser:
    rule = GateRule()
    GATE = field_docs(GateRule)
    p = cli_parser(
        "python -m components.evaluate",
        "Score a candidate checkpoint on the test split, compare it with the "
        "registered champion and decide whether it is blessed.",
    )
    p.add_argument("--data", required=True, help="preprocessed dataset folder")
    p.add_argument(
        "--checkpoint", required=True, help="candidate checkpoint (train output best.pt)"
    )
    p.add_argument(
        "--model-name", default="dailyrec", help="registered model whose @champion is the baseline"
    )
    p.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI"),
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI; none = no champion)",
    )
    p.add_argument("--min-auc", type=float, default=rule.min_auc, help="absolute floor on test AUC")
    p.add_argument(
        "--tolerance",
        type=float,
        default=rule.tolerance,
        help="AUC the candidate may lose vs the champion at the CI's upper bound",
    )
    p.add_argument("--confidence", type=float, default=rule.confidence, help=GATE["confidence"])
    p.add_argument(
        "--if-champion-unusable",
        choices=UNUSABLE_POLICIES,
        default=rule.if_champion_unusable,
        help=GATE["if_champion_unusable"],
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", required=True, help="output folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rule = GateRule(
            min_auc=args.min_auc,
            tolerance=args.tolerance,
            confidence=args.confidence,
            if_champion_unusable=args.if_champion_unusable,
        )
        config = EvaluateConfig(
            data=args.data,
            checkpoint=args.checkpoint,
            out=args.out,
            model_name=args.model_name,
            tracking_uri=args.tracking_uri,
            rule=rule,
            threads=args.threads,
        )
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
    print(summary_line(result["metrics"], result["decision"]))
    print(f"outputs in {args.out}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
