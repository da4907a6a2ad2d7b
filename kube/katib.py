"""The search on a cluster: a Katib ``Experiment`` whose trials are Kubeflow Trainer TrainJobs.

``python -m kube.katib --env a100 [--data DATASET_ON_THE_VOLUME] [--out FILE.yaml]``

* **Algorithm**: Katib's ``hyperband`` (default; Katib has no ASHA suggestion service):
  brackets of random configurations, the top 1/eta of each rung re-run with eta times the
  epochs; the resource parameter is ``max_epochs`` (``r_l`` = the most epochs a trial gets).
  ``parallelTrialCount`` and ``maxTrialCount`` follow from ``r_l`` and ``eta`` exactly as
  Katib's service computes them. ``random`` and ``tpe`` are offered too (every trial trains
  ``max_epochs``).
* **Objective**: ``val_auc``, maximize, metric strategy ``max`` (a trial's best epoch).
* **Parameters**: the search space of components/tune/space.py under the same names, the
  architectures filtered by the estimate stage's memory model for the environment's hardware
  (at the base model's reference vocabulary). Katib's hyperband samples numbers uniformly,
  so there ``lr`` and ``weight_decay`` are log-spaced ``discrete`` grids; ``random``/``tpe``
  get ``double`` with ``distribution: logUniform``.
* **Trial**: a TrainJob from ``kube.trainjob.build_trainjob`` (runtime, node pool,
  GPUs, env as in the daily pipeline; one GPU per trial), its trainer running
  ``torchrun --module components.tune.trial`` -- which writes the trial's model config and plan
  (estimate stage) and then runs the trainer CLI -- with ``${trialParameters.*}`` in its args.
  Katib tells success and failure from the TrainJob's ``Complete``/``Failed`` conditions and
  injects its metrics collector into the pod of node 0 (rank 0), container ``node``.
* **Metrics**: the ``StdOut`` collector with a filter matching the trainer's per-epoch line
  ``epoch N/M  loss L  val_auc X (best ...)``.

Cluster prerequisites (not installed by ``make deploy``): Katib >= 0.17 with ``TrainJob``
(``trainer.kubeflow.org/v1alpha1``) in its ``trialResources`` (katib-config), RBAC for the
Katib controller on trainjobs, and the namespace label
``katib.kubeflow.org/metrics-collector-injection: enabled``.

Offline validation: the document is parsed with the ``kubeflow-katib-api`` models (and must
round-trip unchanged: a misspelled field is an error), checked against the rules of Katib's
admission webhook that apply without a cluster, and the trial's TrainJob (placeholders
filled in) against the Trainer CRD schema or the ``kubeflow-trainer-api`` models.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from components.common.cli import Exit, add_config_flags, cli_parser, exit_for
from components.common.plan import MEMORY_FRACTION, TrainPlan
from components.tune.space import SearchSpace, feasible_architectures, json_arg
from kube.types import MOUNT_PATH

API_VERSION = "kubeflow.org/v1beta1"
ALGORITHMS = ("hyperband", "random", "tpe")
METRIC = "val_auc"
METRIC_FILTER = r"\b(val_auc)\s+([0-9]+\.[0-9]+)"
"""Katib filter: group 1 the metric name, group 2 its value (the trainer's per-epoch log line)."""
PRIMARY_POD_LABELS = {
    "jobset.sigs.k8s.io/replicatedjob-name": "node",
    "batch.kubernetes.io/job-completion-index": "0",
}
"""The pod of node 0 (JobSet's labels on the TrainJob's pods): rank 0 prints the metrics."""
SUCCESS = 'status.conditions.#(type=="Complete")#|#(status=="True")#'
FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'
PLACEHOLDER = re.compile(r"\$\{trialParameters\.([^}]+)\}")
META_KEYS = ("Name", "Namespace", "Kind", "APIVersion")
TRIAL_PARAMETERS = {  # template name -> (search-space parameter, trial CLI flag)
    "learningRate": ("lr", "--lr"),
    "weightDecay": ("weight_decay", "--weight-decay"),
    "warmupFraction": ("warmup_fraction", "--warmup-fraction"),
    "dropout": ("dropout", "--dropout"),
    "dModel": ("d_model", "--d-model"),
    "layers": ("layers", "--layers"),
}
RESOURCE = "max_epochs"
GPU_HARDWARE = "a100-40gb"
"""Profile of GPU environments unless given: the daily pipeline's default hardware_profile."""
LOG_GRID_POINTS = 7


class KatibError(ValueError):
    """An Experiment that would not be accepted; the message lists the problems."""


@dataclass(frozen=True)
class KatibConfig:
    """The Experiment to generate. Every field is checked on construction."""

    env: str = "a100"
    """Cluster environment: kube/clusters/<env>.json (namespace, runtime, node pool, GPUs)."""
    name: str = "dailyrec-tune"
    """Experiment name (lower-case DNS label)."""
    base_model: str = "prod"
    """Model config the trials vary."""
    hardware: str | None = None
    """Profile the trials are planned for; None (the default) = a100-40gb on GPU environments
    (the daily pipeline's default), else cpu-local."""
    global_batch: int = 8192
    """Global batch of every trial."""
    max_epochs: int = 9
    """Most epochs a trial trains (hyperband's r_l)."""
    eta: int = 3
    """Hyperband's reduction factor."""
    algorithm: str = field(default="hyperband", metadata={"choices": ALGORITHMS})
    """hyperband | random | tpe."""
    max_trial_count: int | None = None
    """Trials in all; None (the default) = what hyperband's brackets need (random/tpe: 24)."""
    parallel_trial_count: int | None = None
    """Trials at once; None (the default) = hyperband's minimum, eta ** s_max (random/tpe: 3)."""
    max_failed_trial_count: int = 3
    """Failed trials after which Katib fails the Experiment."""
    data: str = ""
    """Dataset folder on the shared volume the trials train on: the current window's (make deploy
    passes :func:`window_dataset`); required, never a fixed date."""
    root: str = f"{MOUNT_PATH}/tune/katib"
    """Trial outputs go to <root>/<experiment>/<trial name>/ on the shared volume."""
    image: str | None = None
    """Trainer image; None (the default) = the TrainingRuntime's."""
    space: SearchSpace = field(default_factory=SearchSpace)
    """What the trials may change (components/tune/space.py)."""
    memory_fraction: float = MEMORY_FRACTION
    """Share of device memory an architecture may plan to use (as the estimate stage)."""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", self.name) or len(self.name) > 63:
            raise KatibError(f"name {self.name!r} must be a lower-case DNS label")
        if not self.data:
            raise KatibError(
                "data: the dataset folder of the window to search on is required "
                "(make deploy passes the current window's)"
            )
        if self.algorithm not in ALGORITHMS:
            raise KatibError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        for name in ("global_batch", "max_epochs", "max_failed_trial_count"):
            value = getattr(self, name)
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < (0 if "failed" in name else 1)
            ):
                raise KatibError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.eta, int) or self.eta < 2:
            raise KatibError(f"eta must be an integer >= 2, got {self.eta!r}")
        for name in ("max_trial_count", "parallel_trial_count"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise KatibError(f"{name} must be None or an integer >= 1, got {value!r}")

    def hardware_profile(self, accelerator: bool) -> str:
        return self.hardware or (GPU_HARDWARE if accelerator else "cpu-local")


def window_dataset(root: str = MOUNT_PATH) -> str:
    """The daily pipeline's current window: ``datasets/latest``, which each preprocess task points at
    the newest window's dataset (folders are named by end date and cache key, unknown before a run)."""
    from components.common.runs import latest_dataset

    return str(latest_dataset(root))


def hyperband_budget(r_l: float, eta: int) -> tuple[int, int]:
    """(trials, least parallelTrialCount) of Katib's hyperband service for ``r_l`` and ``eta``
    (its own arithmetic: s_max = int(log r_l / log eta); bracket s starts n configurations and
    keeps the top ceil(n_i / eta) of each rung)."""
    s_max = int(math.log(r_l) / math.log(eta))
    trials = 0
    for s in range(s_max, -1, -1):
        n = int(math.ceil((s_max + 1) * eta**s / (s + 1)))
        trials += n
        for i in range(s):
            trials += int(math.ceil(math.ceil(n * eta**-i) / eta))
    return trials, int(math.ceil(eta**s_max))


def number(value: float) -> str:
    """A number as Katib's string, 3 significant digits, never in exponent notation (``1e-06``
    would be read back as a YAML float where the CRD wants a string)."""
    return format(Decimal(f"{value:.3g}"), "f")


def log_grid(low: float, high: float, points: int = LOG_GRID_POINTS) -> list[str]:
    """Log-spaced values from low to high (both included), as Katib's strings."""
    if low == high:
        return [number(low)]
    step = (math.log(high) - math.log(low)) / (points - 1)
    return list(dict.fromkeys(number(math.exp(math.log(low) + i * step)) for i in range(points)))


def reference_plan(base_model: str, hardware: str, global_batch: int) -> tuple[TrainPlan, Any, Any]:
    """(plan shape, vocab, profile) the architectures are filtered at: one process per trial at
    the base model's reference vocabulary (no dataset is at hand when the Experiment is written)."""
    from components.estimate.hardware import load_profile
    from components.train.model import NAMED_CONFIGS, REFERENCE_VOCAB

    profile = load_profile(hardware)
    vocab = REFERENCE_VOCAB[base_model if base_model in NAMED_CONFIGS else "prod"]
    plan = TrainPlan(
        model=base_model,
        micro_batch=1,
        grad_accum=global_batch,
        nproc_per_node=1,
        precision="bf16" if profile.bf16 else "fp32",
    )
    return plan, vocab, profile


def parameters(
    config: KatibConfig, d_models: tuple[int, ...], layers: tuple[int, ...]
) -> list[dict]:
    """The Experiment's search space (same names as components/tune/space.py)."""
    space, out = config.space, []
    for name in ("lr", "weight_decay"):
        low, high = getattr(space, name)
        if config.algorithm == "hyperband":  # its sampler is uniform: a log grid keeps the scale
            out.append(
                {
                    "name": name,
                    "parameterType": "discrete",
                    "feasibleSpace": {"list": log_grid(low, high)},
                }
            )
        else:
            out.append(
                {
                    "name": name,
                    "parameterType": "double",
                    "feasibleSpace": {
                        "min": number(low),
                        "max": number(high),
                        "distribution": "logUniform",
                    },
                }
            )
    for name in ("warmup_fraction", "dropout"):
        low, high = getattr(space, name)
        out.append(
            {
                "name": name,
                "parameterType": "double",
                "feasibleSpace": {"min": number(low), "max": number(high)},
            }
        )
    out.append(
        {
            "name": "d_model",
            "parameterType": "categorical",
            "feasibleSpace": {"list": [str(d) for d in d_models]},
        }
    )
    out.append(
        {
            "name": "layers",
            "parameterType": "categorical",
            "feasibleSpace": {"list": [str(n) for n in layers]},
        }
    )
    if config.algorithm == "hyperband":
        out.append(
            {
                "name": RESOURCE,
                "parameterType": "int",
                "feasibleSpace": {"min": "1", "max": str(config.max_epochs)},
            }
        )
    return out


def _trial_args(config: KatibConfig, hardware: str) -> list[str]:
    """The trial CLI's own arguments: the search settings, and each sampled parameter as Katib's
    placeholder (hyperband's epochs too)."""
    epochs = (
        "${trialParameters.maxEpochs}"
        if config.algorithm == "hyperband"
        else str(config.max_epochs)
    )
    return [
        "--base-model",
        config.base_model,
        "--hardware",
        hardware,
        "--global-batch",
        str(config.global_batch),
        "--max-epochs",
        epochs,
        "--memory-fraction",
        f"{config.memory_fraction:g}",
        *[
            a
            for name, (_, flag) in TRIAL_PARAMETERS.items()
            for a in (flag, f"${{trialParameters.{name}}}")
        ],
    ]


def _trial_parameters(config: KatibConfig) -> list[dict]:
    """The trialTemplate's parameters: the sampled ones, hyperband's epochs, the trial's name."""
    trial_parameters = [
        {"name": name, "reference": param, "description": f"{param} of the trial"}
        for name, (param, _) in TRIAL_PARAMETERS.items()
    ]
    if config.algorithm == "hyperband":
        trial_parameters.append(
            {
                "name": "maxEpochs",
                "reference": RESOURCE,
                "description": "epochs of the trial (hyperband's resource)",
            }
        )
    trial_parameters.append(
        {
            "name": "trialName",
            "reference": "${trialSpec.Name}",
            "description": "the trial's name: its output folder",
        }
    )
    return trial_parameters


def trial_template(config: KatibConfig, target: Any, hardware: str) -> dict:
    """The trialTemplate: a TrainJob (build_trainjob) running the trial CLI with placeholders."""
    from components.train.backend import LaunchSpec
    from components.tune.config import TuneConfig
    from kube.trainjob import build_trainjob

    tracking = target.env.get("MLFLOW_TRACKING_URI")
    out = f"{config.root.rstrip('/')}/{config.name}/${{trialParameters.trialName}}"
    spec = LaunchSpec.of(
        data=config.data,
        out=out,
        tracking_uri=tracking,
        experiment=TuneConfig.__dataclass_fields__["experiment"].default,
    )
    plan = TrainPlan(model=config.base_model, nproc_per_node=1, nnodes=1)
    job = build_trainjob(spec, plan, target, labels={"dailyrec.io/experiment": config.name})
    for key in ("name", "namespace"):  # Katib names the trial's job itself
        job["metadata"].pop(key, None)
    trainer = job["spec"]["trainer"]
    trainer["command"] = ["torchrun", "--module", "components.tune.trial"]
    trainer["args"] = [*trainer["args"], *_trial_args(config, hardware)]
    return {
        "primaryContainerName": "node",
        "primaryPodLabels": dict(PRIMARY_POD_LABELS),
        "successCondition": SUCCESS,
        "failureCondition": FAILURE,
        "trialParameters": _trial_parameters(config),
        "trialSpec": job,
    }


def experiment(config: KatibConfig, schemas: dict | None = None) -> dict:
    """The Experiment document, validated (``schemas``: see :func:`validate_experiment`);
    raises KatibError listing every problem."""
    from kube.types import TrainJobTarget, cluster_target

    target = TrainJobTarget(**json.loads(cluster_target(config.env))["trainjob"])
    if config.image:
        target = dataclasses.replace(target, image=config.image)
    hardware = config.hardware_profile(bool(target.accelerator))
    plan, vocab, profile = reference_plan(config.base_model, hardware, config.global_batch)
    # one GPU per trial: build_trainjob sizes its pod at the node's share per GPU, so trials pack
    from components.train.model import model_config

    archs = feasible_architectures(
        config.space, model_config(config.base_model), vocab, profile, plan, config.memory_fraction
    )
    if config.algorithm == "hyperband":
        trials, least_parallel = hyperband_budget(config.max_epochs, config.eta)
        algorithm = {
            "algorithmName": "hyperband",
            "algorithmSettings": [
                {"name": "resource_name", "value": RESOURCE},
                {"name": "eta", "value": str(config.eta)},
                {"name": "r_l", "value": str(config.max_epochs)},
            ],
        }
    else:
        trials, least_parallel = 24, 3
        algorithm = {"algorithmName": config.algorithm}
    max_trials = config.max_trial_count or trials
    parallel = config.parallel_trial_count or least_parallel
    doc = {
        "apiVersion": API_VERSION,
        "kind": "Experiment",
        "metadata": {
            "name": config.name,
            "namespace": target.namespace,
            "labels": {"app.kubernetes.io/part-of": "dailyrec"},
        },
        "spec": {
            "objective": {
                "type": "maximize",
                "objectiveMetricName": METRIC,
                "metricStrategies": [{"name": METRIC, "value": "max"}],
            },
            "algorithm": algorithm,
            "parallelTrialCount": parallel,
            "maxTrialCount": max_trials,
            "maxFailedTrialCount": config.max_failed_trial_count,
            "metricsCollectorSpec": {
                "collector": {"kind": "StdOut"},
                "source": {"filter": {"metricsFormat": [METRIC_FILTER]}},
            },
            "parameters": parameters(config, archs.d_model, archs.layers),
            "trialTemplate": trial_template(config, target, hardware),
        },
    }
    problems = validate_experiment(doc, schemas)
    if problems:
        raise KatibError("the Katib Experiment does not validate:\n  " + "\n  ".join(problems))
    return doc


# ----------------------------------------------------------------------------- validation


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [
            f"{path}/{k}: not in the Katib schema (dropped by the models)" for k in a if k not in b
        ]
        out += [f"{path}/{k}: added by the models" for k in b if k not in a]
        for k in a.keys() & b.keys():
            out += _differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}/{i}")
        ]
    return [] if a == b else [f"{path}: {a!r} became {b!r}"]


def validate_experiment(doc: dict, schemas: dict | None = None) -> list[str]:
    """Problems of an Experiment document: the Katib models (round trip), the webhook's offline
    rules, and the trial's TrainJob -- against the Trainer CRD schema when ``schemas``
    (``kube.validate.crd_schemas()``, as make deploy loads them) has it, else against the
    kubeflow-trainer-api models. An empty list means it validates."""
    from kubeflow_katib_api import models as m
    from pydantic import ValidationError

    try:
        parsed = m.V1beta1Experiment.from_dict(doc)
    except ValidationError as exc:
        return [f"Katib models: {e['loc']}: {e['msg']}" for e in exc.errors()]
    problems = [f"Katib models: {d}" for d in _differences(doc, parsed.to_dict())]
    spec = parsed.spec
    if not re.fullmatch(
        r"[a-z]([-a-z0-9]*[a-z0-9])?", (parsed.metadata.name if parsed.metadata else "") or ""
    ):
        problems.append("metadata.name must be a lower-case DNS label")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "Experiment":
        problems.append(f"apiVersion/kind must be {API_VERSION} Experiment")
    if spec is None:
        return [*problems, "spec is missing"]
    problems += _check_counts(spec)
    objective = spec.objective
    if (
        objective is None
        or objective.type not in ("maximize", "minimize")
        or not objective.objective_metric_name
    ):
        problems.append("spec.objective needs type maximize|minimize and objectiveMetricName")
    if spec.algorithm is None or spec.algorithm.algorithm_name not in (
        *ALGORITHMS,
        "grid",
        "cmaes",
        "multivariate-tpe",
        "sobol",
        "bayesianoptimization",
    ):
        problems.append("spec.algorithm.algorithmName is missing or not a Katib HP algorithm")
    params = {p.name: p for p in spec.parameters or []}
    problems += _check_parameters(spec.parameters or [])
    if spec.algorithm and spec.algorithm.algorithm_name == "hyperband":
        problems += _check_hyperband(spec, params)
    problems += _check_collector(spec)
    problems += _check_template(spec, params, schemas or {})
    return problems


def _check_counts(spec: Any) -> list[str]:
    out = []
    for name in ("max_trial_count", "parallel_trial_count"):
        if getattr(spec, name) is not None and getattr(spec, name) <= 0:
            out.append(f"spec.{name} must be > 0")
    if spec.max_failed_trial_count is not None and spec.max_failed_trial_count < 0:
        out.append("spec.maxFailedTrialCount must be >= 0")
    if spec.max_trial_count is not None:
        if (spec.max_failed_trial_count or 0) > spec.max_trial_count:
            out.append("spec.maxFailedTrialCount must be <= maxTrialCount")
        if (spec.parallel_trial_count or 0) > spec.max_trial_count:
            out.append("spec.parallelTrialCount must be <= maxTrialCount")
    return out


def _check_parameters(parameters: list[Any]) -> list[str]:
    out = []
    for p in parameters:
        fs = p.feasible_space
        where = f"parameter {p.name}"
        if p.parameter_type not in ("int", "double", "categorical", "discrete"):
            out.append(f"{where}: parameterType {p.parameter_type!r} is not supported")
        if fs is None:
            out.append(f"{where}: feasibleSpace must be given")
            continue
        if fs.distribution not in (None, "uniform", "logUniform", "normal", "logNormal"):
            out.append(f"{where}: distribution {fs.distribution!r} is not supported")
        if p.parameter_type in ("int", "double"):
            if fs.list:
                out.append(f"{where}: feasibleSpace.list is not allowed for {p.parameter_type}")
            try:
                if float(fs.min) > float(fs.max):
                    out.append(f"{where}: min > max")
                if fs.distribution == "logUniform" and float(fs.min) <= 0:
                    out.append(f"{where}: logUniform needs min > 0")
            except (TypeError, ValueError):
                out.append(f"{where}: feasibleSpace.min and .max must be numbers")
        elif fs.min or fs.max or fs.step or not fs.list:
            out.append(f"{where}: {p.parameter_type} takes a non-empty feasibleSpace.list only")
    return out


def _check_hyperband(spec: Any, params: dict[str, Any]) -> list[str]:
    settings = {s.name: s.value for s in spec.algorithm.algorithm_settings or []}
    try:
        r_l = float(settings["r_l"])
        eta = int(float(settings.get("eta", 3))) if int(float(settings.get("eta", 3))) > 0 else 3
        resource = settings["resource_name"]
    except (KeyError, ValueError):
        return ["hyperband: settings r_l (a positive number) and resource_name are required"]
    out = [] if r_l > 0 else ["hyperband: r_l must be > 0"]
    if resource not in params:
        out.append(f"hyperband: resource_name {resource!r} must be one of the parameters")
    if r_l > 0:
        least = hyperband_budget(r_l, eta)[1]
        if (spec.parallel_trial_count or 0) < least:
            out.append(f"hyperband: parallelTrialCount must be at least {least} (eta ** s_max)")
    return out


def _check_collector(spec: Any) -> list[str]:
    mc = spec.metrics_collector_spec
    if mc is None or mc.collector is None or mc.collector.kind != "StdOut":
        return ["metricsCollectorSpec.collector.kind must be StdOut"]
    out = []
    formats = (mc.source.filter.metrics_format if mc.source and mc.source.filter else None) or []
    for f in formats:
        try:
            compiled = re.compile(f)
        except re.error as exc:
            out.append(f"metrics filter {f!r}: {exc}")
            continue
        if compiled.groups < 2:
            out.append(f"metrics filter {f!r}: two groups (name, value) are required")
    return out


def _check_template(spec: Any, params: dict[str, Any], schemas: dict) -> list[str]:
    template = spec.trial_template
    if template is None or not template.trial_spec:
        return ["spec.trialTemplate.trialSpec must be given"]
    out = []
    if not template.primary_container_name:
        out.append("trialTemplate.primaryContainerName must be given")
    if not (template.success_condition and template.failure_condition):
        out.append("trialTemplate.successCondition and failureCondition must be given")
    text = json.dumps(template.trial_spec)
    names: set[str] = set()
    for tp in template.trial_parameters or []:
        if not tp.name or not tp.reference or "{" in tp.name or "}" in tp.name:
            out.append(
                f"trialParameter {tp.name!r}: name and reference required, no braces in the name"
            )
            continue
        if tp.name in names:
            out.append(f"trialParameter {tp.name}: duplicated")
        names.add(tp.name)
        meta = re.fullmatch(r"\$\{trialSpec\.(\w+)(\[.+\])?\}", tp.reference)
        if (
            not (
                meta and (meta.group(1) in META_KEYS or meta.group(1) in ("Labels", "Annotations"))
            )
            and tp.reference not in params
        ):
            out.append(f"trialParameter {tp.name}: reference {tp.reference!r} is not a parameter")
        if f"${{trialParameters.{tp.name}}}" not in text:
            out.append(f"trialParameter {tp.name}: not used in the trialSpec")
    unknown = sorted(set(PLACEHOLDER.findall(text)) - names)
    if unknown:
        out.append(f"trialSpec uses undefined trialParameters: {', '.join(unknown)}")
    job = template.trial_spec
    if (job.get("metadata") or {}).get("name") or (job.get("metadata") or {}).get("namespace"):
        out.append("trialSpec: metadata.name and metadata.namespace must be omitted")
    if not (job.get("apiVersion") and job.get("kind")):
        out.append("trialSpec: apiVersion and kind are required")
    containers = [job.get("spec", {}).get("trainer")] if job.get("kind") == "TrainJob" else []
    if job.get("kind") == "TrainJob" and not (containers[0] or {}).get("command"):
        out.append(
            "trialSpec: the TrainJob's trainer needs a command (Katib wraps it to collect metrics)"
        )
    return out + _check_trainjob(job, schemas)


def _check_trainjob(job: dict, schemas: dict) -> list[str]:
    """The trial's TrainJob with sample values for the placeholders: the Trainer CRD schema when
    ``schemas`` has it, else the kubeflow-trainer-api models."""
    if job.get("kind") != "TrainJob":
        return []
    sample = json.loads(PLACEHOLDER.sub("1", json.dumps(job)))
    sample.setdefault("metadata", {})["name"] = "trial-sample"
    if (sample.get("apiVersion"), "TrainJob") in schemas:
        from kube.validate import validate_objects

        return [f"trialSpec: {p}" for p in validate_objects([sample], schemas)[0]]
    from kubeflow_trainer_api import models as t
    from pydantic import ValidationError

    try:
        t.TrainerV1alpha1TrainJob.from_dict(sample)
    except ValidationError as exc:
        return [f"trialSpec (Trainer models): {e['loc']}: {e['msg']}" for e in exc.errors()]
    return []


def write_experiment(
    path: str | Path, env: str, schemas: dict | None = None, **overrides: Any
) -> dict:
    """Write the validated Experiment for ``env`` as YAML at ``path``; returns the document.
    ``schemas``: the CRD schemas make deploy has loaded (the trial TrainJob is checked against
    them); ``overrides``: :class:`KatibConfig` fields (e.g. data=..., image=...)."""
    import yaml

    from components.common.storage import atomic_write_bytes

    doc = experiment(KatibConfig(env=env, **overrides), schemas)
    atomic_write_bytes(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return doc


def main(argv: list[str] | None = None) -> int:
    p = cli_parser("python -m kube.katib", __doc__.splitlines()[0])
    add_config_flags(p, KatibConfig, skip=("data", "space"))
    p.add_argument(
        "--data",
        help="dataset folder on the shared volume (default: datasets/latest, the newest window)",
    )
    p.add_argument("--space", help="search space JSON (text or file); default: the built-in one")
    p.add_argument(
        "--out", default="build/katib-experiment.yaml", help="where to write the Experiment YAML"
    )
    args = p.parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k not in ("data", "space", "out")}
    try:
        space = SearchSpace.from_dict(json_arg(args.space, "--space"))
        doc = write_experiment(
            args.out, data=args.data or window_dataset(), space=space, **settings
        )
    except ValueError as exc:
        print(f"katib: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    s = doc["spec"]
    print(
        f"wrote {args.out}: {s['algorithm']['algorithmName']}, {s['maxTrialCount']} trials, "
        f"{s['parallelTrialCount']} in parallel; kubectl apply -f {args.out}"
    )
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
