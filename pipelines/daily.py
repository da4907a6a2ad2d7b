"""The daily retraining pipeline ``dailyrec-daily``.

resolve window -> preprocess (cacheable) -> estimate -> train -> evaluate ->
register (only if blessed); all inside an exit handler whose ``finalize`` task
writes the run's summary.json and cleans up whether the run succeeded or not.

Large data moves by path under ``storage_root`` (a mounted volume on the
cluster, a folder locally); KFP carries parameters and small artifacts
(dataset pointer, plan, model pointer, metrics, ROC, Markdown report).
"""

from kfp import dsl

from components.estimate.component import estimate_op
from components.evaluate.component import evaluate_op
from components.preprocess.component import preprocess_op, resolve_window
from components.register.component import register_op
from components.train.component import train_op
from kube.tasks import on_cluster
from pipelines.images import RUNTIME_IMAGE

PIPELINE_NAME = "dailyrec-daily"


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def finalize(status: dsl.PipelineTaskFinalStatus, storage_root: str, run_id: str, kfp_run_id: str,
             model_name: str, launcher: str, cluster_target: str) -> None:
    """Exit handler: the run's summary.json (also for failed runs), leftover temp files removed,
    a TrainJob of a failed or cancelled run deleted, the outcome pushed to Prometheus' Pushgateway."""
    import json

    from components.common.paths import PathError, inside, safe_name
    from components.common.runs import (
        build_summary,
        claimed_by_other,
        run_dir,
        summary_text,
        write_summary,
    )
    from components.common.storage import remove_stale_temps

    rid, refused = run_id or kfp_run_id, None
    try:  # the same check as every other task: a run id never names a folder outside runs/
        folder = inside(storage_root, run_dir(storage_root, safe_name(rid, "run_id")), "run folder")
    except PathError as exc:  # the summary still gets written: under the KFP run id, saying why
        refused, rid = str(exc), safe_name(kfp_run_id, "KFP run id")
        folder = run_dir(storage_root, rid)
    if (other := claimed_by_other(folder, kfp_run_id)) is not None:  # never touch a live run's folder or job
        refused = f"run folder {folder} is in use by KFP run {other}"
        rid = safe_name(kfp_run_id, "KFP run id")
        folder = run_dir(storage_root, rid)
    try:
        run = json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        run = {"data_dir": "", "raw_uri": ""}  # failed before the window was resolved
    for leftover in ("train", "evaluate", "registration.json", "summary.json"):
        remove_stale_temps(folder / leftover)
    error = status.error_message if status.state != "SUCCEEDED" else None
    if refused:
        error = f"{refused}; {error or ''}".rstrip("; ")
    if error and launcher == "trainjob":
        from kube.client import delete_run_trainjob

        delete_run_trainjob(cluster_target, str(folder / "train"))
    summary = build_summary(folder, run["data_dir"], run["raw_uri"], model_name, rid,
                            status=status.state, error=error)
    write_summary(folder, summary)
    print(summary_text(summary))
    from components.common.monitoring import push_run_outcome

    push_run_outcome(summary)  # to $DAILYREC_PUSHGATEWAY when set


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def check_parameters(
    run_date: str, window_days: int, history_days: int, seq_len: int, model_config: str,
    hardware_profile: str, global_batch: int, deadline_hours: float, max_epochs: int, min_auc: float,
    tolerance: float, warm_start: bool, storage_root: str, raw_uri: str, tracking_uri: str, model_name: str,
    launcher: str, max_restarts: int, cluster_target: str, dask_workers: int, run_id: str,
) -> None:
    """Every parameter of the run checked before the first real task: one line naming a bad one."""
    params = dict(locals())  # the parameters, before any other name is bound here
    from components.common.params import check_parameters as check

    check(params)


def prepare_data(*, raw_uri, storage_root, run_date, window_days, history_days, seq_len, run_id,
                 dask_workers, cluster_target, after=None):
    """The resolve-window and preprocess tasks every dailyrec pipeline starts with: ``(window, data)``.

    Arguments are pipeline parameters (channels). Only preprocess is cached, keyed on the
    input fingerprint that the never-cached resolve task computes from today's files.
    """
    window = resolve_window(raw_uri=raw_uri, storage_root=storage_root, run_date=run_date,
                            window_days=window_days, history_days=history_days, seq_len=seq_len,
                            run_id=run_id, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    if after is not None:
        window.after(after)
    on_cluster(window, "resolve-window")
    window.set_caching_options(False)  # must see today's files
    window.set_display_name("resolve window")
    data = preprocess_op(raw_uri=window.outputs["raw_uri"], data_dir=window.outputs["data_dir"],
                         end_date=window.outputs["end_date"], window_days=window_days,
                         history_days=history_days, seq_len=seq_len,
                         input_fingerprint=window.outputs["input_fingerprint"], dask_workers=dask_workers,
                         cluster_target=cluster_target)
    on_cluster(data, "preprocess-op")
    data.set_caching_options(True)  # same files + window + config + code => same dataset
    data.set_display_name("preprocess")
    return window, data


@dsl.pipeline(name=PIPELINE_NAME, description="Daily retraining of the dailyrec BST click-through model: "
                                              "preprocess, estimate, train, evaluate, register.")
def daily(
    run_date: str = "",
    window_days: int = 11,
    history_days: int = 3,
    seq_len: int = 20,
    model_config: str = "prod",
    hardware_profile: str = "a100-40gb",
    global_batch: int = 8192,
    deadline_hours: float = 2.0,
    max_epochs: int = 3,
    min_auc: float = 0.55,
    tolerance: float = 0.002,
    warm_start: bool = True,
    storage_root: str = "/mnt/dailyrec",
    raw_uri: str = "",
    tracking_uri: str = "http://mlflow.dailyrec.svc.cluster.local:5000",
    model_name: str = "dailyrec",
    launcher: str = "local",
    max_restarts: int = 2,
    cluster_target: str = "",
    dask_workers: int = 0,
    run_id: str = "",
):
    """The daily retraining run. Defaults fit a cluster run started from the Kubeflow UI.

    Args:
        run_date: last day of the window, YYYY-MM-DD; empty = the latest day present.
        window_days: days in the window (train + 1 val + 1 test day).
        history_days: extra days read only to fill behaviour histories.
        seq_len: behaviour history length.
        model_config: named model config (debug | local | prod).
        hardware_profile: estimate profile (a100-40gb | a100-80gb | h100-80gb | h200-141gb | cpu-local) or a JSON file.
        global_batch: samples per optimizer step across all processes.
        deadline_hours: training wall-clock budget the plan must meet; 0 = none.
        max_epochs: epochs at most (early stopping on validation AUC may end sooner).
        min_auc: absolute floor on the candidate's test AUC.
        tolerance: AUC the candidate may lose against the champion at the 95% CI's upper bound.
        warm_start: initialize from the champion's weights when their shapes match.
        storage_root: shared storage for raw data (raw/ unless raw_uri), datasets/ and runs/.
        raw_uri: raw event logs (dt=YYYY-MM-DD/ folders); empty = storage_root/raw.
        tracking_uri: MLflow tracking and registry URI.
        model_name: registered model name.
        launcher: training backend: local (torchrun in the task's pod) or trainjob (Kubeflow Trainer).
        max_restarts: local torchrun restarts of failed workers (they resume from the last
            checkpoint); on a cluster the TrainingRuntime's JobSet failurePolicy restarts the pods.
        cluster_target: JSON of kube/clusters/<env>.json (TrainJob and Dask placement); set by make deploy.
        dask_workers: 0 = Dask threads in the preprocess task; N = a DaskCluster of N workers on Kubernetes.
        run_id: folder name of this run under storage_root/runs; empty = the KFP run id.
    """
    # first: the parameters exactly as given (locals() holds only them here)
    parameters = dict(locals())
    exit_task = finalize(storage_root=storage_root, run_id=run_id, kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                         model_name=model_name, launcher=launcher, cluster_target=cluster_target)
    on_cluster(exit_task, "finalize")
    exit_task.set_caching_options(False)
    with dsl.ExitHandler(exit_task, name="daily-run"):
        checked = check_parameters(**parameters)
        on_cluster(checked, "check-parameters")
        checked.set_caching_options(False)
        checked.set_display_name("check parameters")
        window, data = prepare_data(raw_uri=raw_uri, storage_root=storage_root, run_date=run_date,
                                    window_days=window_days, history_days=history_days, seq_len=seq_len,
                                    run_id=run_id, dask_workers=dask_workers, cluster_target=cluster_target,
                                    after=checked)
        plan = estimate_op(data_dir=data.outputs["data_dir"], run_dir=window.outputs["run_dir"],
                           model_config=model_config, hardware_profile=hardware_profile,
                           global_batch=global_batch, deadline_hours=deadline_hours, max_epochs=max_epochs,
                           preprocess_seconds=data.outputs["seconds"])
        on_cluster(plan, "estimate-op")
        plan.set_caching_options(False)
        plan.set_display_name("estimate")
        trained = train_op(data_dir=data.outputs["data_dir"], plan_path=plan.outputs["plan_path"],
                           run_dir=window.outputs["run_dir"], warm_start=warm_start, model_name=model_name,
                           tracking_uri=tracking_uri, launcher=launcher, max_restarts=max_restarts,
                           cluster_target=cluster_target)
        on_cluster(trained, "train-op")
        trained.set_caching_options(False)
        trained.set_display_name("train")
        evaluated = evaluate_op(data_dir=data.outputs["data_dir"], checkpoint=trained.outputs["checkpoint"],
                                run_dir=window.outputs["run_dir"], model_name=model_name,
                                tracking_uri=tracking_uri, min_auc=min_auc, tolerance=tolerance)
        on_cluster(evaluated, "evaluate-op")
        evaluated.set_caching_options(False)
        evaluated.set_display_name("evaluate")
        # evaluate's single return value is "blessed" (see evaluate_op on kfp.local)
        with dsl.If(evaluated.outputs["Output"] == True, name="blessed"):  # noqa: E712 (KFP condition)
            registered = register_op(checkpoint=trained.outputs["checkpoint"], run_dir=window.outputs["run_dir"],
                                     model_name=model_name, tracking_uri=tracking_uri,
                                     run_id=window.outputs["run_id"])
            on_cluster(registered, "register-op")
            registered.set_caching_options(False)
            registered.set_display_name("register")
