"""``python -m pipelines.compile [--out build/pipeline.yaml] [--env a100]``.

The pipeline as KFP IR YAML. ``--env`` bakes an environment's cluster defaults
into the parameters (TrainJob launcher, cluster target); image references come
from ``$DAILYREC_RUNTIME_IMAGE`` / ``$DAILYREC_TRAINER_IMAGE`` (pipelines/images.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kfp import compiler

from components.common.cli import HelpFormatter
from pipelines.daily import daily

DEFAULT_OUT = "build/pipeline.yaml"


def cluster_defaults(env: str, trainer_image: str | None = None) -> dict[str, Any]:
    """Parameter defaults for a cluster environment: TrainJobs placed per pipelines/clusters/<env>.json."""
    import json

    from pipelines.cluster import target

    doc = json.loads(target(env))
    if trainer_image:
        doc["trainjob"]["image"] = trainer_image
    return {"launcher": "trainjob", "cluster_target": json.dumps(doc, sort_keys=True, separators=(",", ":"))}


def compile_pipeline(out: str | Path = DEFAULT_OUT, parameters: dict[str, Any] | None = None) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.yaml")
    compiler.Compiler().compile(pipeline_func=daily, package_path=str(tmp), pipeline_parameters=parameters)
    tmp.replace(out)  # never a half-written pipeline for `make deploy` to upload
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.compile", formatter_class=HelpFormatter,
                                description="Compile the daily pipeline to KFP IR YAML.")
    p.add_argument("--out", default=DEFAULT_OUT, help="where to write the compiled pipeline (KFP IR YAML)")
    p.add_argument("--env", default=None,
                   help="bake in the defaults of pipelines/clusters/<env>.json (default: none, the local defaults)")
    args = p.parse_args(argv)
    try:
        parameters = cluster_defaults(args.env) if args.env else None
    except ValueError as exc:
        print(f"compile: error: {exc}", file=sys.stderr)
        return 2
    try:
        out = compile_pipeline(args.out, parameters)
    except OSError as exc:  # e.g. --out in a folder that cannot be created
        print(f"compile: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"compiled {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
