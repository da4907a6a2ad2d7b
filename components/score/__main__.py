"""`python -m components.score`: score one raw-contract day with a registered model (batch).

    python -m components.score --raw DIR --date 2026-03-15 \\
        --model models:/dailyrec@champion --out scores.parquet

Prints one summary line (rows read = scored + quarantined, the AUC when the
day has both labels) and the full accounting as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for
from components.score.batch import score_day, summary_line
from components.score.config import ScoreConfig


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser("python -m components.score", __doc__.splitlines()[0])
    add_config_flags(p, ScoreConfig)
    p.add_argument("--json", action="store_true", help="print the full accounting as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    as_json = args.pop("json")
    try:
        config = ScoreConfig(**args)
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
    print(json.dumps(result, indent=2) if as_json else summary_line(result))
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
