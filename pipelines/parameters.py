"""The daily pipeline's parameters, declared once.

Each :class:`Parameter` names one parameter of ``dailyrec-daily``: its type, default, meaning and
whether it is the deployment's configuration rather than a run's choice. From :data:`DAILY` come
the defaults of the pipeline's signature (:mod:`pipelines.daily`), the docstring the Kubeflow UI
shows beside each parameter (:func:`parameters_doc`), the settings ``make deploy`` bakes into the
uploaded pipeline (:data:`DEPLOYMENT`, :mod:`pipelines.compile`) and the table in
docs/pipeline.md (:func:`markdown_table`, ``make docs``). KFP reads a pipeline's parameters from a
real Python signature, so the pipeline and its check task spell theirs out; a unit test holds
both to this table (names, order, types, defaults), and one to a rule per parameter in
:mod:`pipelines.params`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from components.common.registry_read import MODEL_NAME
from components.common.retention import DEFAULT_KEEP_DAYS
from kube.types import MOUNT_PATH

NEGATIVE_KEEP = 1.0
"""The daily run's share of the training negatives: the smallest that trained models of the same
quality as every row on each world of benchmarks/downsampling.py (its ``chosen``; a test holds
the two equal; docs/performance.md)."""
NEGATIVES_PER_POSITIVE = 12.0
"""The daily run's most training negatives per positive: the smallest whole number that keeps, on
each world of benchmarks/downsampling.py, at least the smallest share of the same quality as every
row measured there (its ``chosen_ratio``; a test holds the two equal; docs/performance.md). Where
negatives are fewer than this many per positive, every row is trained on."""
MLFLOW_SERVICE_URI = "http://mlflow.dailyrec.svc.cluster.local:5000"
"""The MLflow service ``make deploy`` runs beside the pipelines (manifests/base): the tracking URI
of a run on the cluster."""


@dataclass(frozen=True)
class Parameter:
    """One pipeline parameter."""

    name: str
    type: type
    """``str``, ``int``, ``float`` or ``bool``: what KFP types the run form's field as."""
    default: Any
    meaning: str
    """One sentence or two: the UI's help beside the field and the docs' table (``code`` in
    backticks)."""
    shown_default: str | None = None
    """How the docs' table shows the default when the value itself would not read well."""
    deployment: bool = False
    """The deployment's configuration: baked into the uploaded pipeline, not in the run form."""

    def __post_init__(self) -> None:
        if not isinstance(self.default, self.type) or (
            self.type is not bool and isinstance(self.default, bool)
        ):
            raise TypeError(f"parameter {self.name}: default {self.default!r} is not a {self.type}")


DAILY: tuple[Parameter, ...] = (
    Parameter(
        "run_date",
        str,
        "",
        "last day of the window, YYYY-MM-DD; empty = the day before the run's schedule time (a "
        "manual run: its start), or locally the latest day present",
    ),
    Parameter("window_days", int, 11, "days in the window (train + 1 validation + 1 test day)"),
    Parameter(
        "history_days", int, 3, "extra days read only to fill behaviour histories and counts"
    ),
    Parameter("seq_len", int, 20, "behaviour history length"),
    Parameter(
        "model_config",
        str,
        "prod",
        "named model config (`debug`, `local`, `prod`) or a tuned one's path (docs/tuning.md)",
    ),
    Parameter(
        "hardware_profile",
        str,
        "a100-40gb",
        "the estimate's profile (`a100-40gb`, `a100-80gb`, `h100-80gb`, `h200-141gb`, "
        "`cpu-local`) or a JSON file; the default node label selects 40 GB A100s",
    ),
    Parameter("global_batch", int, 8192, "samples per optimizer step across all processes"),
    Parameter(
        "deadline_hours", float, 2.0, "training wall-clock budget the plan must meet; 0 = none"
    ),
    Parameter(
        "max_epochs", int, 3, "epochs at most (early stopping on validation AUC may end sooner)"
    ),
    Parameter(
        "negative_keep",
        float,
        NEGATIVE_KEEP,
        "share of the training negatives trained on, in (0, 1] (all positives kept; scores stay "
        "calibrated: docs/stages.md)",
    ),
    Parameter(
        "negatives_per_positive",
        float,
        NEGATIVES_PER_POSITIVE,
        "train on at most this many negatives per positive, lowering `negative_keep` where "
        "negatives outnumber positives by more; 0 = no limit",
    ),
    Parameter("min_auc", float, 0.55, "floor on the candidate's served test AUC"),
    Parameter(
        "tolerance",
        float,
        0.002,
        "AUC the candidate may lose against the champion at the 95% interval's upper bound",
    ),
    Parameter(
        "guards_report_only",
        bool,
        False,
        "report the data guards (each new day against the champion's training window) without "
        "blocking on them: for a day known to be unusual",
    ),
    Parameter(
        "warm_start", bool, True, "initialize from the champion's weights when their shapes match"
    ),
    Parameter(
        "storage_root",
        str,
        MOUNT_PATH,
        "shared storage for raw data (`raw/` unless `raw_uri`), `datasets/` and `runs/`",
        deployment=True,
    ),
    Parameter(
        "raw_uri",
        str,
        "",
        "raw event logs (`dt=YYYY-MM-DD/` folders); empty = `storage_root/raw`",
        deployment=True,
    ),
    Parameter(
        "tracking_uri",
        str,
        MLFLOW_SERVICE_URI,
        "MLflow tracking and registry URI",
        shown_default="the cluster's MLflow service",
        deployment=True,
    ),
    Parameter("model_name", str, MODEL_NAME, "registered model name", deployment=True),
    Parameter(
        "launcher",
        str,
        "local",
        "training backend: `local` (torchrun in the task's pod) or `trainjob` (Kubeflow "
        "Trainer; set by `make deploy`)",
        deployment=True,
    ),
    Parameter(
        "max_restarts",
        int,
        2,
        "local torchrun restarts of failed workers, which resume from the last checkpoint; on a "
        "cluster the TrainingRuntime's JobSet `failurePolicy` restarts the pods",
        deployment=True,
    ),
    Parameter(
        "cluster_target",
        str,
        "",
        "TrainJob and Dask placement (`kube/clusters/<env>.json`); set by `make deploy`",
        deployment=True,
    ),
    Parameter(
        "dask_workers",
        int,
        0,
        "0 = Dask threads in the preprocess task; N = a DaskCluster of N workers on Kubernetes",
    ),
    Parameter(
        "retention_days",
        int,
        DEFAULT_KEEP_DAYS,
        "days of run folders and datasets the storage root keeps (the exit handler removes older "
        "ones; the registry's `@champion` and `@previous` lineage and unfinished runs are always "
        "kept); 0 = keep everything",
        deployment=True,
    ),
    Parameter(
        "run_id",
        str,
        "",
        "folder name of this run under `storage_root/runs`; empty = the KFP run id",
    ),
)
"""The parameters of ``dailyrec-daily``, in the order of its signature. Defaults fit a cluster
run started from the Kubeflow UI; the local configs (configs/*.json) override the hardware ones."""

DEFAULTS: dict[str, Any] = {p.name: p.default for p in DAILY}
"""Name -> default, for the pipeline's signature."""
DEPLOYMENT: tuple[str, ...] = tuple(p.name for p in DAILY if p.deployment)
"""Parameters that are the deployment's configuration, not a run's choice: the compiled pipeline
takes them as constants (its defaults, with the environment's baked in), so the Kubeflow UI's run
form shows only what a person starting a run chooses. kfp.local runs (``make run``) still take them
as parameters."""


def parameters_doc(parameters: tuple[Parameter, ...] = DAILY) -> str:
    """The ``Args:`` section of a docstring: what the Kubeflow UI shows beside each field."""
    lines = ["Args:"]
    for p in parameters:
        lines += textwrap.wrap(
            f"{p.name}: {p.meaning}.",
            width=96,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
    return "\n".join(lines) + "\n"


def _shown(p: Parameter) -> str:
    if p.shown_default is not None:
        return p.shown_default
    if p.default == "":
        return "empty"
    if isinstance(p.default, bool):
        return str(p.default).lower()
    return f"`{p.default}`" if isinstance(p.default, str) else str(p.default)


def markdown_table(parameters: tuple[Parameter, ...] = DAILY) -> str:
    """The table of docs/pipeline.md (``make docs`` writes it; a test checks it)."""
    lines = ["| parameter | default | meaning |", "|---|---|---|"]
    for p in parameters:
        name = f"`{p.name}`" + (" (*deployment*)" if p.deployment else "")
        lines.append(f"| {name} | {_shown(p)} | {p.meaning} |")
    return "\n".join(lines)
