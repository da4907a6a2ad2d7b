"""CLI: ``python -m components.datagen --out DIR [--days D ...]`` (see ``--help``)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for, field_docs
from components.datagen.config import DatagenConfig
from components.datagen.generator import extended, generate, one_writer

PROG = "python -m components.datagen"


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line (no usage block), exit status :attr:`Exit.USAGE`."""

    def error(self, message: str) -> NoReturn:
        self.exit(Exit.USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = cli_parser(
        PROG,
        "Write synthetic e-commerce exposure/click logs (raw-event contract) with each "
        "row's true click probability in a _truth sidecar.",
        parser_class=_OneLineParser,
    )
    # hand-written: a Path, shown as DIR
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=field_docs(DatagenConfig)["out"],
    )
    add_config_flags(parser, DatagenConfig, skip=("out",))
    parser.add_argument(  # not a field: extends an existing dataset with its own config
        "--append-days",
        type=int,
        default=None,
        metavar="N",
        help="extend the dataset already in --out by N days (its own parameters; "
        "other options are ignored; default: none, write a new dataset)",
    )
    return parser


def _value_range(values: dict) -> str:
    known = [v for v in values.values() if v is not None]
    return f"{min(known):.3f}-{max(known):.3f}" if known else "n/a"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.categories > args.items and not any(a.startswith("--categories") for a in argv):
        args.categories = args.items  # the default is for larger catalogues: one item each
    try:
        # read-modify-write of one dataset: two writers (two make next-day) take turns, the
        # second extending what the first wrote
        with one_writer(
            args.out,
            lambda: print(
                f"{PROG}: waiting for another writer of {args.out}", file=sys.stderr, flush=True
            ),
        ):
            config = (
                extended(args.out, args.append_days)
                if args.append_days is not None
                else DatagenConfig(**{k: v for k, v in vars(args).items() if k != "append_days"})
            )
            summary = generate(config)
    except (ValueError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    dates = list(summary["rows_per_day"])
    print(
        f"wrote {summary['rows_total']:,} rows over {len(dates)} day(s) ({dates[0]}..{dates[-1]}) "
        f"to {config.out} in {summary['seconds']:.1f}s ({summary['rows_per_second']:,.0f} rows/s)\n"
        f"click rate {_value_range(summary['click_rate'])}, oracle AUC {_value_range(summary['oracle_auc'])}, "
        f"popularity-only AUC {_value_range(summary['popularity_auc'])}"
    )
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
