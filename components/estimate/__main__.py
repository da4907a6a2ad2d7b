"""CLI of the estimate stage: ``python -m components.estimate --data DIR --model NAME
--hardware PROFILE [--global-batch B] [--deadline-hours H] [--[no-]probe] --out plan.json``."""

from __future__ import annotations

import argparse
import sys

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for
from components.estimate.config import EstimateConfig, EstimateError
from components.estimate.hardware import HardwareError, available_profiles


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.estimate",
        "Write a training plan (plan.json) for a model, dataset and hardware.",
    )
    add_config_flags(p, EstimateConfig, skip=("hardware",))
    # hand-written so that its help lists the profiles present
    p.add_argument(
        "--hardware",
        default=EstimateConfig.hardware,
        help=f"profile name ({', '.join(available_profiles())}) or a JSON file",
    )
    p.add_argument("--out", required=True, help="where to write plan.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out = args.pop("out")
    from components.common.dataset import DatasetError
    from components.estimate.planner import estimate_and_write
    from components.estimate.table import plan_table

    try:
        config = EstimateConfig(**args)
        path, doc = estimate_and_write(config, out)
    except (EstimateError, HardwareError, DatasetError) as exc:
        print(f"estimate: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:  # e.g. --out in a folder that cannot be created
        print(f"estimate: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(plan_table(doc))
    print(f"plan written to {path}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
