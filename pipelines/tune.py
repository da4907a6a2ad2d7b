"""The hyperparameter search pipeline `dailyrec-tune`, and its run on this machine.

resolve window -> preprocess (cacheable; the same tasks as the daily pipeline) -> tune
(an Optuna study with ASHA/Hyperband pruning, trials one at a time inside the task; see
components/tune). The result is `runs/<run id>/tune/tuned.json`, also copied to
`<storage root>/tuned/latest.json`: give either path as the daily pipeline's
`model_config` and the estimate stage plans the tuned architecture with the tuned lr
(scaled to its global batch), weight decay and warmup.

`python -m pipelines.tune [--config configs/tune.json] [--data data/raw] [--set key=value ...]`
runs it through KFP's local runner as `make run` does for the daily pipeline (same run
folders, same MLflow database); `--compile FILE` writes the pipeline for Kubeflow. For
searches that need a GPU per trial and trials in parallel, see kube/katib.py.
"""

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from kfp import compiler, dsl, kubernetes

from components.common.cli import Exit, cli_parser, exit_for, signal_exit
from components.tune.config import PIPELINE_PARAMETERS, pipeline_defaults
from kube.tasks import TASK_LABEL, mlflow_client
from kube.types import MOUNT_PATH, PVC
from pipelines.ops.tune import tune_op, with_settings_docs
from pipelines.parameters import MLFLOW_SERVICE_URI
from pipelines.steps import prepare_data

PIPELINE_NAME = "dailyrec-tune"
DEFAULT_CONFIG = "configs/tune.json"
TUNE_RUN_FORMAT = "dailyrec.tune-run/v1"
"""The format of a search run's ``runs/<run id>/summary.json`` (the search's own summary, with the
run's status, wall-clock seconds and log folder): another document than a daily run's summary."""
TUNE_RESOURCES = ("4", "16Gi", "24Gi")
"""cpu request, memory request, memory limit of the tune task (trials train inside it)."""


TUNE = pipeline_defaults()
"""The search settings' defaults (TuneConfig's), as the pipeline's parameters take them."""


def _tune_task_settings(tuned) -> None:
    """The search task's volume, label, MLflow client, resources; never cached."""
    kubernetes.mount_pvc(tuned, pvc_name=PVC, mount_path=MOUNT_PATH)
    kubernetes.add_pod_label(tuned, TASK_LABEL, "tune-op")
    mlflow_client(tuned)
    cpu, memory, memory_limit = TUNE_RESOURCES
    tuned.set_cpu_request(cpu).set_memory_request(memory).set_memory_limit(memory_limit)
    tuned.set_caching_options(False)
    tuned.set_display_name("tune")


@dsl.pipeline(
    name=PIPELINE_NAME,
    description="Hyperparameter search for the dailyrec BST model: "
    "preprocess, then an Optuna study with ASHA/Hyperband pruning.",
)
@with_settings_docs
def tune_pipeline(
    run_date: str = "",
    window_days: int = 11,
    history_days: int = 3,
    seq_len: int = 20,
    base_model: str = TUNE["base_model"],
    hardware_profile: str = TUNE["hardware_profile"],
    global_batch: int = TUNE["global_batch"],
    max_epochs: int = TUNE["max_epochs"],
    trials: int = TUNE["trials"],
    pruner: str = TUNE["pruner"],
    min_epochs: int = TUNE["min_epochs"],
    reduction_factor: int = TUNE["reduction_factor"],
    sampler: str = TUNE["sampler"],
    seed: int = TUNE["seed"],
    search_space: str = TUNE["search_space"],
    enqueue: str = TUNE["enqueue"],
    timeout_hours: float = TUNE["timeout_hours"],
    storage_root: str = MOUNT_PATH,
    raw_uri: str = "",
    # the cluster's MLflow (deployed by make deploy) rather than TuneConfig's none
    tracking_uri: str = MLFLOW_SERVICE_URI,
    dask_workers: int = 0,
    cluster_target: str = "",
    run_id: str = "",
):
    """A hyperparameter search on the window ending at run_date.

    Args:
        run_date: last day of the window, YYYY-MM-DD; empty = the latest day present.
        window_days: days in the window (train + 1 val + 1 test day).
        history_days: extra days read only to fill behaviour histories.
        seq_len: behaviour history length.
        storage_root: shared storage: raw/ (unless raw_uri), datasets/, runs/ and tuned/.
        raw_uri: raw event logs (dt=YYYY-MM-DD/ folders); empty = storage_root/raw.
        dask_workers: 0 = Dask threads in the preprocess task; N = a DaskCluster of N workers.
        cluster_target: JSON of kube/clusters/<env>.json (Dask placement); set by make deploy.
        run_id: folder name of this run under storage_root/runs; empty = the KFP run id.
    """
    given = dict(locals())  # the parameters, before anything else is a local
    window, data = prepare_data(SimpleNamespace(**given))
    tuned = tune_op(
        dataset=data.outputs["dataset"],
        run_dir=window.outputs["run_dir"],
        storage_root=storage_root,
        **{name: given[name] for name in PIPELINE_PARAMETERS},
    )
    _tune_task_settings(tuned)


def compile_tune(out: str | Path) -> Path:
    """The pipeline as KFP IR YAML (written atomically)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.yaml")
    compiler.Compiler().compile(pipeline_func=tune_pipeline, package_path=str(tmp))
    tmp.replace(out)
    return out


def check_parameters(params: dict) -> None:
    """Refuse bad search settings before any task starts (a ValueError with one line)."""
    from components.tune.config import config_from_parameters

    config_from_parameters("-", "-", params)


def run_tune_local(
    params: dict, root: str | Path = ".", run_id: str | None = None, verbose: bool = False
) -> dict:
    """Run the search pipeline through kfp.local; return its summary (status FAILED on failure).
    The terminal gets the short console of a local run, ``runs/<run id>/logs/`` every line
    (``verbose``: the terminal gets them too)."""
    from pipelines.local import local_run

    check_parameters(params)
    root = Path(root).resolve()
    with local_run(params, root, run_id) as (run_id, folder, params):
        return _run_tune(params, run_id, folder, verbose)


def _run_tune(params: dict, run_id: str, folder: Path, verbose: bool) -> dict:
    from components.common.storage import atomic_write_json
    from components.tune.study import SUMMARY_FILE
    from pipelines.local import LOGS, quiet_console

    started = time.perf_counter()
    logs = folder / LOGS
    print(
        f"dailyrec: tune run {run_id} (folder {folder}); KFP local runner, tasks as subprocesses; "
        f"full logs in {logs}",
        flush=True,
    )
    with quiet_console(logs, verbose):
        tune_pipeline(**params)
    try:
        summary = {
            "status": "SUCCEEDED",
            **json.loads((folder / "tune" / SUMMARY_FILE).read_text()),
        }
    except (OSError, ValueError):
        summary = {"status": "FAILED", "error": f"the search wrote no summary (see {logs})"}
    summary.update(
        format=TUNE_RUN_FORMAT,  # not a daily run's summary: the dashboard leaves it out
        run_id=run_id,
        pipeline=PIPELINE_NAME,
        wall_seconds=round(time.perf_counter() - started, 1),
        logs=str(logs),
    )
    atomic_write_json(folder / "summary.json", summary)
    return summary


def _parser():
    p = cli_parser("python -m pipelines.tune", __doc__.splitlines()[0])
    p.add_argument("--config", default=DEFAULT_CONFIG, help="JSON file of dailyrec-tune parameters")
    p.add_argument(
        "--data",
        default=None,
        help="raw events folder (dt=YYYY-MM-DD/ in the raw contract); default: raw_uri, else ROOT/raw",
    )
    p.add_argument("--root", default=".", help="storage root: datasets/, runs/ and tuned/ go here")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a parameter"
    )
    p.add_argument(
        "--run-id", default=None, help="folder name of the run under ROOT/runs (default: a new id)"
    )
    p.add_argument(
        "--compile",
        default=None,
        metavar="FILE",
        help="only write the pipeline YAML to FILE (default: run the search)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="print everything KFP's runner prints (the executor JSON, every trial's full log)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    from components.common.lock import LockBusy
    from components.common.paths import PathError
    from components.common.proctree import Stopped, stop_tree_on_signals
    from pipelines.local import LocalRunError, load_config, set_overrides

    args = _parser().parse_args(argv)
    if args.compile:
        print(f"compiled {compile_tune(args.compile)}")
        return Exit.OK
    try:
        overrides = set_overrides(args.set)
        if args.data:
            overrides["raw_uri"] = args.data
        params = load_config(args.config, overrides, pipeline=tune_pipeline)
        with stop_tree_on_signals():
            summary = run_tune_local(params, args.root, args.run_id, args.verbose)
    except Stopped as exc:
        print(f"tune: {exc}: every task process was stopped", file=sys.stderr)
        return signal_exit(exc.signum)
    except (LocalRunError, ValueError) as exc:  # checked before anything runs: a bad request
        print(f"tune: error: {exc}", file=sys.stderr)
        return Exit.USAGE
    except (LockBusy, PathError, OSError) as exc:
        print(f"tune: error: {exc}", file=sys.stderr)
        return exit_for(exc)
    if summary["status"] != "SUCCEEDED":
        print(f"\ntune run {summary['run_id']}: FAILED: {summary['error']}", file=sys.stderr)
        return Exit.FAILED
    from components.tune.study import summary_text

    latest = Path(args.root) / "tuned" / "latest.json"
    print(
        f"\ntune run {summary['run_id']}: SUCCEEDED in {summary['wall_seconds']:.0f}s\n"
        f"{summary_text(summary)}"
    )
    print(f"logs     {summary['logs']}")
    print(f"next     python -m pipelines.local --set model_config={latest.resolve()}")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
