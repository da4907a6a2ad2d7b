"""CLI: ``python -m components.datagen --out DIR [--days D ...]`` (see ``--help``)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import NoReturn

from components.common.cli import Exit, cli_parser, exit_for
from components.datagen.generator import ID_FORMATS, DatagenConfig, extended, generate

PROG = "python -m components.datagen"


class _OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line (no usage block), exit status :attr:`Exit.USAGE`."""

    def error(self, message: str) -> NoReturn:
        self.exit(Exit.USAGE, f"{self.prog}: error: {message}\n")


def _iso_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date YYYY-MM-DD: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = cli_parser(
        PROG,
        "Write synthetic e-commerce exposure/click logs (raw-event contract) with each "
        "row's true click probability in a _truth sidecar.",
        parser_class=_OneLineParser,
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="output folder (replaced atomically; refused if it is a non-empty folder of something else)",
    )
    parser.add_argument("--days", type=int, default=14, help="number of days")
    parser.add_argument(
        "--append-days",
        type=int,
        default=None,
        metavar="N",
        help="extend the dataset already in --out by N days (its own parameters; "
        "other options are ignored; default: none, write a new dataset)",
    )
    parser.add_argument("--users", type=int, default=20_000, help="distinct users")
    parser.add_argument("--items", type=int, default=50_000, help="distinct items")
    parser.add_argument("--categories", type=int, default=500, help="item categories (<= items)")
    parser.add_argument("--events-per-day", type=int, default=200_000, help="exposure rows per day")
    parser.add_argument("--seed", type=int, default=7, help="random seed (same seed => same files)")
    parser.add_argument(
        "--start-date", type=_iso_date, default=dt.date(2026, 1, 1), help="first day, YYYY-MM-DD"
    )
    parser.add_argument(
        "--click-rate", type=float, default=0.08, help="target share of clicked exposures"
    )
    parser.add_argument(
        "--id-format", choices=ID_FORMATS, default="int", help="int64 ids or strings like u17"
    )
    parser.add_argument(
        "--rows-per-file", type=int, default=1_000_000, help="most rows per part file"
    )
    return parser


def _value_range(values: dict) -> str:
    known = [v for v in values.values() if v is not None]
    return f"{min(known):.3f}-{max(known):.3f}" if known else "n/a"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = (
            extended(args.out, args.append_days)
            if args.append_days is not None
            else DatagenConfig(
                out=args.out,
                days=args.days,
                users=args.users,
                items=args.items,
                events_per_day=args.events_per_day,
                seed=args.seed,
                categories=args.categories,
                start_date=args.start_date,
                click_rate=args.click_rate,
                id_format=args.id_format,
                rows_per_file=args.rows_per_file,
            )
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
