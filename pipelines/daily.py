"""The daily retraining pipeline ``dailyrec-daily``.

resolve window -> preprocess (cacheable) -> estimate -> train -> evaluate ->
register (only if blessed); all inside an exit handler whose ``finalize`` task
writes the run's summary.json and cleans up whether the run succeeded or not.

Large data moves by path under ``storage_root`` (a mounted volume on the
cluster, a folder locally); stages hand each other small KFP artifacts that
point to it (dataset -> plan -> model -> evaluation -> registration), so the
Kubeflow UI shows the run's lineage.

Built for a runner: a KFP backend (>= :data:`MIN_KFP_BACKEND`, for :data:`BACKEND_FEATURES`) resolves
the run's schedule time and retries idempotent tasks with backoff; kfp.local (``make run``) cannot
resolve the schedule-time placeholder and would sleep through backoffs of failures that are
deterministic there, so its build has neither (:data:`pipelines.steps.LOCAL`).
"""

from types import SimpleNamespace

from kfp import dsl

from components.common.images import RUNTIME_IMAGE
from kube.tasks import on_cluster, sized_by
from pipelines.ops.estimate import estimate_op
from pipelines.ops.evaluate import evaluate_op
from pipelines.ops.register import register_op
from pipelines.ops.train import train_op
from pipelines.parameters import DEFAULTS, parameters_doc
from pipelines.steps import (
    CLUSTER,
    DEFAULT_TTL,
    RUN_DEADLINE_S,
    Runner,
    RunTTL,
    harden,
    prepare_data,
    task_settings,
)

PIPELINE_NAME = "dailyrec-daily"
DESCRIPTION = (
    "Daily retraining of the dailyrec BST click-through model: "
    "preprocess, estimate, train, evaluate, register."
)
BACKEND_FEATURES = (
    ((2, 14), "the exit handler takes dsl.PipelineTaskFinalStatus"),
    (
        (2, 15),
        "optional Secret/ConfigMap env vars (#12216; older backends leave the signing Secret and "
        "monitoring ConfigMap's tasks in CreateContainerConfigError)",
    ),
    ((2, 17), "the schedule-time placeholder is resolved (#13474): a run trains on its own day"),
    (
        (2, 17),
        "DAG states are recomputed recursively (#13322): the exit handler sees a final state",
    ),
    ((2, 17), "a run-level deadline (PipelineConfig.active_deadline_seconds, #13187)"),
)
"""What the pipeline needs of a KFP backend, by the release that brought it."""
MIN_KFP_BACKEND = max(release for release, _ in BACKEND_FEATURES)
"""Oldest KFP backend that runs this pipeline as written: ``make deploy`` refuses an older one."""


def _set_doc(doc: str):
    """Give a function its docstring (KFP reads parameter descriptions from it; the text is shared)."""

    def apply(func):
        func.__doc__ = doc
        return func

    return apply


PARAMETERS_DOC = parameters_doc()
"""The pipeline's ``Args:`` (:data:`pipelines.parameters.DAILY`): what the Kubeflow UI shows."""


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
def finalize(
    status: dsl.PipelineTaskFinalStatus,
    storage_root: str,
    run_id: str,
    kfp_run_id: str,
    model_name: str,
    tracking_uri: str,
    launcher: str,
    cluster_target: str,
    retention_days: int,
) -> None:
    """Exit handler: the run's outcome and summary.json (also for failed runs), pushed to Prometheus'
    Pushgateway; then the cleanup: a TrainJob of a failed or cancelled run deleted, the storage
    root's retention policy applied (pipelines/finalize.py).

    Args:
        status: how the run's tasks ended (kfp.local's or the KFP backend's vocabulary).
        storage_root: shared storage holding runs/.
        run_id: folder name of this run under storage_root/runs; empty = kfp_run_id.
        kfp_run_id: the KFP run id.
        model_name: registered model name (for the summary; its champion's lineage is kept).
        tracking_uri: MLflow registry URI (which runs the champion and previous came from).
        launcher: training backend of the run (trainjob: its TrainJob is deleted on failure).
        cluster_target: JSON of the cluster environment (the TrainJob's namespace).
        retention_days: days of run folders and datasets kept on storage_root; 0 = keep all.
    """
    from components.common.attempts import attempt, final_record
    from pipelines.finalize import finalize_run, locate

    deleter = None
    if launcher == "trainjob":
        from kube.client import run_trainjob_deleter

        deleter = run_trainjob_deleter(cluster_target)
    # a failure another attempt repeats (bad input: exit 2; a full disk) is not retried
    with attempt(final_record(locate(storage_root, run_id, kfp_run_id)[0], "finalize"), "finalize"):
        # decided on the state and the run's records: a KFP backend leaves the error message empty
        finalize_run(
            status.state,
            status.error_message,
            storage_root=storage_root,
            run_id=run_id,
            kfp_run_id=kfp_run_id,
            model_name=model_name,
            tracking_uri=tracking_uri,
            retention_days=retention_days,
            delete_trainjob=deleter,
        )


@dsl.component(base_image=RUNTIME_IMAGE, install_kfp_package=False)
@_set_doc(
    "Every parameter of the run checked before the first real task: one line naming a bad one.\n\n"
    + PARAMETERS_DOC
)
def check_parameters(
    run_date: str,
    window_days: int,
    history_days: int,
    seq_len: int,
    model_config: str,
    hardware_profile: str,
    global_batch: int,
    deadline_hours: float,
    max_epochs: int,
    negative_keep: float,
    negatives_per_positive: float,
    min_auc: float,
    tolerance: float,
    guards_report_only: bool,
    warm_start: bool,
    storage_root: str,
    raw_uri: str,
    tracking_uri: str,
    model_name: str,
    launcher: str,
    max_restarts: int,
    cluster_target: str,
    dask_workers: int,
    retention_days: int,
    run_id: str,
) -> None:
    params = dict(locals())  # the parameters, before any other name is bound here
    from pipelines.params import check_parameters as check

    check(params)


def _finalize_task(p, runner: Runner):
    """The exit handler's task: ``finalize`` for this run, hardened and never cached."""
    exit_task = finalize(
        storage_root=p.storage_root,
        run_id=p.run_id,
        kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        model_name=p.model_name,
        tracking_uri=p.tracking_uri,
        launcher=p.launcher,
        cluster_target=p.cluster_target,
        retention_days=p.retention_days,
    )
    harden(on_cluster(exit_task, "finalize"), "finalize", runner.retries)
    exit_task.set_caching_options(False)
    return exit_task


def _estimate_and_train(p, window, data, runner: Runner):
    """The estimate and train tasks on the preprocessed window: ``(plan, trained)``."""
    dataset, run_dir = data.outputs["dataset"], window.outputs["run_dir"]
    plan = task_settings(
        estimate_op(
            dataset=dataset,
            run_dir=run_dir,
            model_config=p.model_config,
            hardware_profile=p.hardware_profile,
            global_batch=p.global_batch,
            deadline_hours=p.deadline_hours,
            max_epochs=p.max_epochs,
            negative_keep=p.negative_keep,
            negatives_per_positive=p.negatives_per_positive,
            preprocess_seconds=data.outputs["seconds"],
        ),
        "estimate-op",
        "estimate",
        runner,
    )
    trained = task_settings(
        train_op(
            dataset=dataset,
            plan=plan.outputs["plan"],
            run_dir=run_dir,
            warm_start=p.warm_start,
            model_name=p.model_name,
            tracking_uri=p.tracking_uri,
            launcher=p.launcher,
            max_restarts=p.max_restarts,
            cluster_target=p.cluster_target,
        ),
        "train-op",
        "train",
        runner,
    )
    return plan, trained


def _evaluate_and_register(p, window, data, plan, trained, runner: Runner) -> None:
    """The evaluate task, sized by the plan, then register (which skips a candidate not blessed)."""
    run_dir = window.outputs["run_dir"]
    evaluated = task_settings(
        evaluate_op(
            dataset=data.outputs["dataset"],
            model=trained.outputs["model"],
            run_dir=run_dir,
            model_name=p.model_name,
            tracking_uri=p.tracking_uri,
            min_auc=p.min_auc,
            tolerance=p.tolerance,
            guards_report_only=p.guards_report_only,
        ),
        "evaluate-op",
        "evaluate",
        runner,
    )
    # sized from the test split (estimate reads the dataset's meta.json), not a fixed pod
    sized_by(evaluated, plan.outputs["evaluate_cpu"], plan.outputs["evaluate_memory"])
    # no dsl.If here: a sub-DAG inside the exit handler leaves the exit DAG's state stale
    # on a KFP backend (the state is recomputed only after a container task finishes), so
    # register always runs and does nothing for a candidate that is not blessed
    task_settings(
        register_op(
            model=trained.outputs["model"],
            evaluation=evaluated.outputs["metrics"],
            run_dir=run_dir,
            model_name=p.model_name,
            tracking_uri=p.tracking_uri,
            run_id=window.outputs["run_id"],
        ),
        "register-op",
        "register",
        runner,
    )


def _run_config(runner: Runner, ttl: RunTTL) -> dsl.PipelineConfig | None:
    """A cluster run's deadline, a backstop past every task's worst case (pipelines/steps.py): a
    run never meets the next day's; and how long its finished workflow is kept. kfp.local has no
    deadline (nor workflows to keep) of its own."""
    if not runner.retries:
        return None
    return dsl.PipelineConfig(
        active_deadline_seconds=RUN_DEADLINE_S,
        ttl_seconds_after_success=ttl.success_s,
        ttl_seconds_after_failure=ttl.failure_s,
    )


def daily_pipeline(runner: Runner = CLUSTER, ttl: RunTTL = DEFAULT_TTL):
    """The ``dailyrec-daily`` pipeline built for ``runner`` (``pipelines.steps.CLUSTER`` or
    ``LOCAL``); on a cluster its finished workflows are kept as ``ttl`` says."""

    @dsl.pipeline(
        name=PIPELINE_NAME,
        description=DESCRIPTION,
        pipeline_config=_run_config(runner, ttl),
    )
    @_set_doc(
        "The daily retraining run. Defaults fit a cluster run started from the Kubeflow UI.\n\n"
        + PARAMETERS_DOC
    )
    def daily(
        run_date: str = DEFAULTS["run_date"],
        window_days: int = DEFAULTS["window_days"],
        history_days: int = DEFAULTS["history_days"],
        seq_len: int = DEFAULTS["seq_len"],
        model_config: str = DEFAULTS["model_config"],
        hardware_profile: str = DEFAULTS["hardware_profile"],
        global_batch: int = DEFAULTS["global_batch"],
        deadline_hours: float = DEFAULTS["deadline_hours"],
        max_epochs: int = DEFAULTS["max_epochs"],
        negative_keep: float = DEFAULTS["negative_keep"],
        negatives_per_positive: float = DEFAULTS["negatives_per_positive"],
        min_auc: float = DEFAULTS["min_auc"],
        tolerance: float = DEFAULTS["tolerance"],
        guards_report_only: bool = DEFAULTS["guards_report_only"],
        warm_start: bool = DEFAULTS["warm_start"],
        storage_root: str = DEFAULTS["storage_root"],
        raw_uri: str = DEFAULTS["raw_uri"],
        tracking_uri: str = DEFAULTS["tracking_uri"],
        model_name: str = DEFAULTS["model_name"],
        launcher: str = DEFAULTS["launcher"],
        max_restarts: int = DEFAULTS["max_restarts"],
        cluster_target: str = DEFAULTS["cluster_target"],
        dask_workers: int = DEFAULTS["dask_workers"],
        retention_days: int = DEFAULTS["retention_days"],
        run_id: str = DEFAULTS["run_id"],
    ):
        # first: the parameters exactly as given (locals() holds them, and the enclosing runner)
        parameters = dict(locals())
        parameters.pop("runner", None)
        p = SimpleNamespace(**parameters)  # the same channels, by attribute for the steps below
        with dsl.ExitHandler(_finalize_task(p, runner), name="daily-run"):
            checked = task_settings(
                check_parameters(**parameters), "check-parameters", "check parameters", runner
            )
            window, data = prepare_data(
                p, after=checked, schedule_time=runner.schedule_time, retries=runner.retries
            )
            plan, trained = _estimate_and_train(p, window, data, runner)
            _evaluate_and_register(p, window, data, plan, trained, runner)

    return daily


daily = daily_pipeline(CLUSTER)
"""The pipeline as compiled for a KFP backend (``make compile``, ``make deploy``)."""
