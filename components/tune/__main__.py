"""CLI: ``python -m components.tune --data DIR --out DIR [--base-model local] [--trials 20] ...``.

Runs (or, with the same --out, resumes) a hyperparameter search and writes OUT/tuned.json,
the model config file the daily pipeline takes as ``model_config``. Every flag is a field
of :class:`components.tune.study.TuneConfig`; ``--space`` and ``--enqueue`` take JSON text
or the path of a JSON file.
"""

from __future__ import annotations

import argparse
import sys

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for, field_docs
from components.tune.config import TuneConfig
from components.tune.space import SearchSpace, json_arg
from components.tune.study import TuneError


def build_parser() -> argparse.ArgumentParser:
    p = cli_parser(
        "python -m components.tune",
        "Hyperparameter search (Optuna, pruned) for the model on a preprocessed dataset.",
    )
    add_config_flags(p, TuneConfig, skip=("space", "enqueue"))
    docs = field_docs(TuneConfig)
    for name, unset in (("space", "the built-in space"), ("enqueue", "none")):
        p.add_argument(f"--{name}", help=f"{docs[name]} JSON text or file (default: {unset})")
    p.add_argument("--fresh", action="store_true", help="delete an earlier search in --out first")
    return p


def config_from_args(args: argparse.Namespace) -> TuneConfig:
    fields = {k: v for k, v in vars(args).items() if k not in ("space", "enqueue", "fresh")}
    enqueue = json_arg(args.enqueue, "--enqueue") or []
    if not isinstance(enqueue, list):
        raise ValueError("--enqueue: expected a JSON list of parameter objects")
    return TuneConfig(
        **fields,
        space=SearchSpace.from_dict(json_arg(args.space, "--space")),
        enqueue=tuple(enqueue),
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except (TypeError, ValueError) as exc:
        print(f"tune: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    import torch

    from components.common.tracking import TrackingError
    from components.tune.study import remove_trial_outputs, summary_text, tune

    torch.set_num_threads(1)  # trials run in this process; the plan's cpu_threads says the same
    if args.fresh:
        remove_trial_outputs(config.out)
    try:
        summary = tune(config)
    except (TuneError, TrackingError, ValueError) as exc:
        print(f"tune: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    print(summary_text(summary))
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
