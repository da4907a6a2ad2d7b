"""Steps every dailyrec pipeline shares: what its runner can do, each task's timeout and retries, and
the resolve-window + preprocess pair the daily and the tune pipelines both start with."""

from dataclasses import dataclass

from kfp import dsl, kubernetes

from components.preprocess.component import preprocess_op, resolve_window
from kube.tasks import on_cluster


@dataclass(frozen=True)
class Runner:
    """What the pipeline's runner can do."""

    name: str
    schedule_time: str
    """What resolve-window gets as the run's schedule time."""
    retries: bool
    """Whether tasks carry retry policies."""


CLUSTER = Runner("cluster", dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER, retries=True)
LOCAL = Runner("local", "", retries=False)

# (retries, timeout in seconds) per task. Retried where a second attempt is safe: resolve lists files
# and rewrites run.json; preprocess rebuilds atomically (or finds its folder done); estimate rewrites the
# plan; train resumes from its last checkpoint and follows its own TrainJob; evaluate rewrites its
# outputs; register finds the version its run registered (tags) instead of registering twice; finalize
# rewrites the summary. check-parameters is deterministic. The timeout is the pod's activeDeadlineSeconds.
TASK_POLICY = {
    "check-parameters": (0, 10 * 60),
    "resolve-window": (2, 30 * 60),
    "preprocess-op": (2, 6 * 3600),
    "estimate-op": (2, 30 * 60),
    "train-op": (2, 12 * 3600),
    "evaluate-op": (2, 2 * 3600),
    "register-op": (2, 30 * 60),
    "finalize": (2, 30 * 60),
}
BACKOFF_S, BACKOFF_FACTOR = 60, 2.0


def harden(task, name: str, retries: bool = True):
    """The task's timeout and, where the runner retries, its retry policy with exponential backoff.

    Argo counts the retry window (``backoff_max_duration``) from the first attempt's start, so it
    covers every attempt at its full timeout plus the waits between them."""
    count, timeout = TASK_POLICY[name]
    kubernetes.set_timeout(task, timeout)
    if retries and count:
        waits = sum(BACKOFF_S * BACKOFF_FACTOR**i for i in range(count))
        task.set_retry(
            count,
            backoff_duration=f"{BACKOFF_S}s",
            backoff_factor=BACKOFF_FACTOR,
            backoff_max_duration=f"{int(timeout * (count + 1) + waits)}s",
        )
    return task


def prepare_data(
    *,
    raw_uri,
    storage_root,
    run_date,
    window_days,
    history_days,
    seq_len,
    run_id,
    dask_workers,
    cluster_target,
    after=None,
    schedule_time: str = "",
    retries: bool = False,
):
    """The resolve-window and preprocess tasks every dailyrec pipeline starts with: ``(window, data)``.

    Arguments are pipeline parameters (channels), and the runner's schedule time and retry
    choice. Only preprocess is cached, keyed on the input fingerprint that the never-cached
    resolve task computes from today's files; it takes no artifact input, so that key stays
    the same from run to run.
    """
    window = resolve_window(
        raw_uri=raw_uri,
        storage_root=storage_root,
        run_date=run_date,
        schedule_time=schedule_time,
        window_days=window_days,
        history_days=history_days,
        seq_len=seq_len,
        run_id=run_id,
        kfp_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    if after is not None:
        window.after(after)
    harden(on_cluster(window, "resolve-window"), "resolve-window", retries)
    window.set_caching_options(False)  # must see today's files
    window.set_display_name("resolve window")
    data = preprocess_op(
        raw_uri=window.outputs["raw_uri"],
        data_dir=window.outputs["data_dir"],
        end_date=window.outputs["end_date"],
        window_days=window_days,
        history_days=history_days,
        seq_len=seq_len,
        input_fingerprint=window.outputs["input_fingerprint"],
        dask_workers=dask_workers,
        cluster_target=cluster_target,
    )
    harden(on_cluster(data, "preprocess-op"), "preprocess-op", retries)
    data.set_caching_options(True)  # same files + window + config + code => same dataset
    data.set_display_name("preprocess")
    return window, data


def task_settings(task, name: str, display: str, runner: Runner):
    """Cluster settings, timeout and retries of a task that is never cached."""
    harden(on_cluster(task, name), name, runner.retries)
    task.set_caching_options(False)
    task.set_display_name(display)
    return task
