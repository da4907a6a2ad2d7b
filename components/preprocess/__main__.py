"""CLI: ``python -m components.preprocess --raw DIR --out DIR [options]``."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
from pathlib import Path

from components.common.cli import Exit, cli_parser, exit_for, field_docs
from components.preprocess.config import PreprocessConfig
from components.preprocess.errors import InputError
from components.preprocess.stage import format_summary, preprocess


def build_parser() -> argparse.ArgumentParser:
    defaults = {f.name: f.default for f in dataclasses.fields(PreprocessConfig)}
    DOCS = field_docs(PreprocessConfig)
    p = cli_parser(
        "python -m components.preprocess",
        "Raw e-commerce event logs -> validated, hashed, sequenced, time-split arrays.",
    )
    p.add_argument(
        "--raw", required=True, help="raw events root (dt=YYYY-MM-DD/ folders; path or URI)"
    )
    p.add_argument("--out", required=True, help="dataset folder to write")
    p.add_argument(
        "--end-date",
        type=dt.date.fromisoformat,
        default=None,
        help="last day of the window (default: latest day present)",
    )
    p.add_argument("--days", type=int, default=defaults["days"], help="days in the window")
    p.add_argument(
        "--history-days",
        type=int,
        default=defaults["history_days"],
        help="look-back days read only for histories",
    )
    p.add_argument("--val-days", type=int, default=defaults["val_days"], help=DOCS["val_days"])
    p.add_argument("--test-days", type=int, default=defaults["test_days"], help=DOCS["test_days"])
    p.add_argument("--seq-len", type=int, default=defaults["seq_len"], help="history length L")
    p.add_argument(
        "--neg-len",
        type=int,
        default=defaults["neg_len"],
        help="recent skipped exposures kept per row",
    )
    p.add_argument(
        "--item-buckets", type=int, default=defaults["item_buckets"], help=DOCS["item_buckets"]
    )
    p.add_argument(
        "--category-buckets",
        type=int,
        default=defaults["category_buckets"],
        help=DOCS["category_buckets"],
    )
    p.add_argument(
        "--user-buckets", type=int, default=defaults["user_buckets"], help=DOCS["user_buckets"]
    )
    p.add_argument(
        "--max-skew-hours",
        type=float,
        default=defaults["max_skew_hours"],
        help=DOCS["max_skew_hours"],
    )
    p.add_argument(
        "--max-quarantine-fraction",
        type=float,
        default=defaults["max_quarantine_fraction"],
        help="fail when more than this fraction of the rows read, overall or of any one "
        "day, is quarantined (default: %(default)s)",
    )
    p.add_argument(
        "--max-duplicate-fraction",
        type=float,
        default=defaults["max_duplicate_fraction"],
        help="fail when more than this fraction of one day's rows are exact duplicates "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--rows-per-partition",
        type=int,
        default=defaults["rows_per_partition"],
        help=DOCS["rows_per_partition"],
    )
    p.add_argument(
        "--shuffle-buffer-mb",
        type=int,
        default=defaults["shuffle_buffer_mb"],
        help="memory the local disk shuffle may buffer before spilling",
    )
    p.add_argument(
        "--scheduler",
        default=defaults["scheduler"],
        help="threads | processes | sync | local-cluster | tcp://host:port",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="local threads/processes (default: all cores)"
    )
    p.add_argument(
        "--force", action="store_true", help="recompute even if the output is up to date"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        meta = preprocess(PreprocessConfig(**vars(args)))
    except (InputError, ValueError) as exc:
        print(f"preprocess: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except (
        OSError,
        ImportError,
    ) as exc:  # unwritable --out, s3:// without s3fs, no scheduler at tcp://
        print(f"preprocess: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(format_summary(meta))
    print(f"meta: {str(Path(args.out) / 'meta.json')!r}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
