"""``python -m components.score``: score one raw-contract day with a registered model (batch).

    python -m components.score --raw DIR --date 2026-03-15 \\
        --model models:/dailyrec@champion --out scores.parquet

Prints one summary line (rows read = scored + quarantined, the AUC when the
day has both labels) and the full accounting as JSON with ``--json``.
"""

from __future__ import annotations

import json
import sys

from components.common.cli import Exit, cli_parser, exit_for
from components.score.batch import ScoreConfig, score_day, summary_line


def main(argv: list[str] | None = None) -> int:
    p = cli_parser("python -m components.score", __doc__.splitlines()[0])
    p.add_argument("--raw", required=True, help="raw events root with dt=YYYY-MM-DD/ folders")
    p.add_argument("--date", required=True, help="the day to score (YYYY-MM-DD)")
    p.add_argument("--out", required=True, help="Parquet file to write")
    p.add_argument(
        "--model", default=ScoreConfig.model, help="models:/NAME@ALIAS or models:/NAME/VERSION"
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow registry (default: $MLFLOW_TRACKING_URI, else sqlite under ./runs)",
    )
    p.add_argument(
        "--max-skew-hours",
        type=float,
        default=ScoreConfig.max_skew_hours,
        help="timestamps may fall this far outside the day; further out is quarantined",
    )
    p.add_argument("--batch", type=int, default=ScoreConfig.batch, help="rows per forward pass")
    p.add_argument(
        "--scheduler",
        default=ScoreConfig.scheduler,
        choices=("threads", "sync"),
        help="Dask scheduler",
    )
    p.add_argument("--workers", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--json", action="store_true", help="print the full accounting as JSON")
    args = p.parse_args(argv)
    try:
        config = ScoreConfig(
            raw=args.raw,
            date=args.date,
            out=args.out,
            model=args.model,
            tracking_uri=args.tracking_uri,
            max_skew_hours=args.max_skew_hours,
            batch=args.batch,
            scheduler=args.scheduler,
            workers=args.workers,
        )
        result = score_day(config)
    except (ValueError, OSError, RuntimeError) as exc:  # InputError, IntegrityError, TrackingError
        print(f"score: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except Exception as exc:  # MlflowException: unknown model, version or alias
        print(
            f"score: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            file=sys.stderr,
        )
        return Exit.FAILED
    print(json.dumps(result, indent=2) if args.json else summary_line(result))
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
