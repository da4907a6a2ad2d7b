"""``python -m pipelines.compile [--out build/pipeline.yaml] [--env a100|local|none]``.

The pipeline as KFP IR YAML for a cluster environment: ``--env`` (default a100) bakes its
settings in (TrainJob launcher, cluster target with the overlay's node pool) and, with the other
deployment settings (:data:`pipelines.parameters.DEPLOYMENT`), takes them out of the run form as constants;
``--env none`` compiles the plain definition (launcher local: torchrun inside the train task's
pod, as kfp.local runs it). Image references come from ``$DAILYREC_RUNTIME_IMAGE`` /
``$DAILYREC_TRAINER_IMAGE`` (components/common/images.py); ``make deploy`` pins the pushed ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from kfp import compiler

from components.common.cli import Exit, cli_parser, exit_for
from pipelines.daily import daily_pipeline
from pipelines.parameters import DEPLOYMENT
from pipelines.steps import CLUSTER, DEFAULT_TTL, RunTTL

DEFAULT_OUT = "build/pipeline.yaml"


def cluster_defaults(env: str, images: dict[str, str] | None = None) -> dict[str, Any]:
    """Parameter defaults for a cluster environment: TrainJobs and Dask clusters placed per
    kube/clusters/<env>.json and the overlay's node pool, with ``images`` (runtime, trainer) pinned."""
    from kube.types import cluster_target

    return {"launcher": "trainjob", "cluster_target": cluster_target(env, images)}


class BakeError(ValueError):
    """The compiled pipeline does not have the shape baking expects (the message says where)."""


def bake(spec: dict, names: tuple[str, ...] = DEPLOYMENT) -> dict:
    """``spec`` (the compiled pipeline's IR) with ``names`` taken out of its parameters and passed
    to the root tasks as constants: their values are the parameters' defaults."""
    root = spec["root"]
    params = root["inputDefinitions"]["parameters"]
    values = {name: params.pop(name)["defaultValue"] for name in names if name in params}
    for task in root["dag"]["tasks"].values():
        for source in task.get("inputs", {}).get("parameters", {}).values():
            if source.get("componentInputParameter") in values:
                source["runtimeValue"] = {"constant": values[source.pop("componentInputParameter")]}
    left = sorted(set(values) & set(_read_parameters(root)))
    if left:  # a parameter read where a constant cannot replace it
        raise BakeError(f"pipeline parameters {left} are still read outside the root's tasks")
    return spec


def _read_parameters(node: Any):
    """Every ``componentInputParameter`` named anywhere under ``node``."""
    if isinstance(node, dict):
        if isinstance(node.get("componentInputParameter"), str):
            yield node["componentInputParameter"]
        for value in node.values():
            yield from _read_parameters(value)
    elif isinstance(node, list):
        for value in node:
            yield from _read_parameters(value)


def with_pull_secrets(spec: dict, platform: dict, secrets: tuple[str, ...]) -> dict:
    """``platform`` (the compiled pipeline's platform document) with ``secrets`` as the image pull
    secrets of every executor of ``spec``: the entries ``kfp.kubernetes.set_image_pull_secrets``
    writes for one task, for all of them. A run started from the Kubeflow UI runs its pods as the
    form's service account (default-editor unless changed), which has no pull secret of ours."""
    if not secrets:
        return platform
    executors = (
        platform.setdefault("platforms", {})
        .setdefault("kubernetes", {})
        .setdefault("deploymentSpec", {})
        .setdefault("executors", {})
    )
    entries = [
        {"secretName": name, "secretNameParameter": {"runtimeValue": {"constant": name}}}
        for name in secrets
    ]
    for name in spec["deploymentSpec"]["executors"]:
        executors.setdefault(name, {})["imagePullSecret"] = entries
    return platform


def compile_pipeline(
    out: str | Path = DEFAULT_OUT,
    parameters: dict[str, Any] | None = None,
    ttl: RunTTL = DEFAULT_TTL,
    pull_secrets: tuple[str, ...] = (),
) -> Path:
    from pipelines.params import check_parameters

    check_parameters(dict(parameters or {}))  # what the run's first task refuses, refused here
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.yaml")
    compiler.Compiler().compile(
        pipeline_func=daily_pipeline(CLUSTER, ttl),
        package_path=str(tmp),
        pipeline_parameters=parameters,
    )
    spec, *platform = yaml.safe_load_all(tmp.read_text())
    platform = [with_pull_secrets(spec, platform[0] if platform else {}, pull_secrets)]
    tmp.write_text(yaml.safe_dump_all([bake(spec), *platform], sort_keys=False))
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
    ) + f"; {', '.join(DEPLOYMENT)} baked in, not in the run form"
    print(f"compiled {out} ({what})")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
