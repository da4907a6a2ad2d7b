"""CLI: ``python -m components.preprocess --raw DIR --out DIR [options]``: one flag per field of
:class:`components.preprocess.config.PreprocessConfig`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for
from components.preprocess.config import PreprocessConfig
from components.preprocess.errors import InputError


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.preprocess",
        "Raw e-commerce event logs -> validated, hashed, sequenced, time-split arrays.",
    )
    add_config_flags(p, PreprocessConfig)  # every flag is a field
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from components.preprocess.stage import format_summary, preprocess  # Dask: not for --help

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
