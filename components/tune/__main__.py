"""CLI: ``python -m components.tune --data DIR --out DIR [--base-model local] [--trials 20] ...``.

Runs (or, with the same --out, resumes) a hyperparameter search and writes OUT/tuned.json,
the model config file the daily pipeline takes as ``model_config``. Every flag is a field
of :class:`components.tune.study.TuneConfig`; ``--space`` and ``--enqueue`` take JSON text
or the path of a JSON file.
"""

from __future__ import annotations

import argparse
import sys

from components.common.cli import HelpFormatter, field_docs
from components.tune.space import SearchSpace, json_arg
from components.tune.study import PRUNERS, SAMPLERS, STORAGES, TuneConfig, TuneError


def build_parser() -> argparse.ArgumentParser:
    d = TuneConfig.__dataclass_fields__
    DOCS = field_docs(TuneConfig)
    p = argparse.ArgumentParser(
        prog="python -m components.tune",
        description="Hyperparameter search (Optuna, pruned) for the model on a preprocessed dataset.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--data", required=True, help="dataset folder (preprocess output)")
    p.add_argument(
        "--out", required=True, help="output folder: tuned.json, tune_summary.json, study.db"
    )
    p.add_argument(
        "--base-model",
        default=d["base_model"].default,
        help="model config the trials vary: debug | local | prod | a .json file",
    )
    p.add_argument(
        "--hardware", default=d["hardware"].default, help="hardware profile of the trials"
    )
    p.add_argument(
        "--global-batch", type=int, default=d["global_batch"].default, help=DOCS["global_batch"]
    )
    p.add_argument(
        "--max-epochs", type=int, default=d["max_epochs"].default, help="epochs per trial at most"
    )
    p.add_argument(
        "--trials", type=int, default=d["trials"].default, help="complete + pruned trials to run"
    )
    p.add_argument("--pruner", choices=PRUNERS, default=d["pruner"].default, help=DOCS["pruner"])
    p.add_argument(
        "--min-epochs",
        type=int,
        default=d["min_epochs"].default,
        help="epochs before a trial can be pruned (the pruner's min resource)",
    )
    p.add_argument(
        "--reduction-factor",
        type=int,
        default=d["reduction_factor"].default,
        help=DOCS["reduction_factor"],
    )
    p.add_argument(
        "--sampler", choices=SAMPLERS, default=d["sampler"].default, help=DOCS["sampler"]
    )
    p.add_argument("--seed", type=int, default=d["seed"].default, help=DOCS["seed"])
    p.add_argument(
        "--space", default=None, help="search space JSON (text or file); default: the built-in one"
    )
    p.add_argument(
        "--enqueue", default=None, help="JSON list of parameter sets to try first (default: none)"
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI, one run per trial (default: none)",
    )
    p.add_argument("--experiment", default=d["experiment"].default, help=DOCS["experiment"])
    p.add_argument("--study-name", default=d["study_name"].default, help=DOCS["study_name"])
    p.add_argument(
        "--storage", choices=STORAGES, default=d["storage"].default, help=DOCS["storage"]
    )
    p.add_argument(
        "--timeout-hours",
        type=float,
        default=None,
        help="start no trial after this long (default: no limit)",
    )
    p.add_argument(
        "--memory-fraction",
        type=float,
        default=d["memory_fraction"].default,
        help=DOCS["memory_fraction"],
    )
    p.add_argument(
        "--name", default=d["name"].default, help="name of the best config in tuned.json"
    )
    p.add_argument("--keep-checkpoints", action="store_true", help="keep every trial's checkpoints")
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
        return 2
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
        return 1
    print(summary_text(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
