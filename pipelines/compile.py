"""``python -m pipelines.compile [--out build/pipeline.yaml] [--env a100|local|none]``.

The pipeline as KFP IR YAML for a cluster environment: ``--env`` (default a100) bakes its
defaults into the parameters (TrainJob launcher, cluster target with the overlay's node pool);
``--env none`` compiles the plain definition (launcher local: torchrun inside the train task's
pod, as kfp.local runs it). Image references come from ``$DAILYREC_RUNTIME_IMAGE`` /
``$DAILYREC_TRAINER_IMAGE`` (components/common/images.py); ``make deploy`` pins the pushed ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kfp import compiler

from components.common.cli import Exit, cli_parser, exit_for
from pipelines.daily import daily

DEFAULT_OUT = "build/pipeline.yaml"


def cluster_defaults(env: str, images: dict[str, str] | None = None) -> dict[str, Any]:
    """Parameter defaults for a cluster environment: TrainJobs and Dask clusters placed per
    kube/clusters/<env>.json and the overlay's node pool, with ``images`` (runtime, trainer) pinned."""
    from kube.types import cluster_target

    return {"launcher": "trainjob", "cluster_target": cluster_target(env, images)}


def compile_pipeline(
    out: str | Path = DEFAULT_OUT, parameters: dict[str, Any] | None = None
) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.yaml")
    compiler.Compiler().compile(
        pipeline_func=daily, package_path=str(tmp), pipeline_parameters=parameters
    )
    tmp.replace(out)  # never a half-written pipeline for `make deploy` to upload
    return out


def main(argv: list[str] | None = None) -> int:
    p = cli_parser("python -m pipelines.compile", "Compile the daily pipeline to KFP IR YAML.")
    p.add_argument(
        "--env",
        default="a100",
        help="cluster environment whose defaults are baked in (kube/clusters/<env>.json); "
        "none: the plain pipeline with the local launcher",
    )
    p.add_argument(
        "--out", default=DEFAULT_OUT, help="where to write the compiled pipeline (KFP IR YAML)"
    )
    args = p.parse_args(argv)
    try:
        parameters = cluster_defaults(args.env) if args.env != "none" else None
    except ValueError as exc:
        print(f"compile: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    try:
        out = compile_pipeline(args.out, parameters)
    except OSError as exc:  # e.g. --out in a folder that cannot be created
        print(f"compile: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_for(exc)
    what = (
        f"ENV={args.env}: launcher=trainjob, cluster target of kube/clusters/{args.env}.json"
        if parameters
        else "no environment: launcher=local (torchrun inside the train task's pod)"
    )
    print(f"compiled {out} ({what})")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
