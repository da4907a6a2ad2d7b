"""Steps every dailyrec pipeline shares: what its runner can do, each task's timeout and retries, and
the resolve-window + preprocess pair the daily and the tune pipelines both start with."""

from dataclasses import dataclass

from kfp import dsl, kubernetes

from kube.tasks import on_cluster
from pipelines.ops.preprocess import preprocess_op, resolve_window


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

# Who retries what (docs/cluster.md, "Retries, timeouts, cancellation"):
# * inside training, the TrainingRuntime's JobSet restarts all nodes after a crashed rank or a lost
#   node (maxRestarts 2), restarts after a preemption or eviction without counting it, and fails at
#   once on a full disk; all of it within the one TrainJob's activeDeadlineSeconds;
# * KFP retries a task only for what a new attempt can fix: its own pod lost, a service briefly
#   down. A failure no attempt can fix (bad input, a full disk, a TrainJob whose restarts or deadline
#   are spent) is recorded and a later attempt fails at once (components/common/attempts.py); a
#   retried train task adopts the run's TrainJob (named by the run) instead of launching another.
# (retries, timeout of one attempt in seconds) per task; the timeout is the pod's
# activeDeadlineSeconds. Retried where a second attempt is safe: resolve lists files and rewrites
# run.json; preprocess rebuilds atomically (or finds its folder done); estimate rewrites the plan;
# train resumes from its last checkpoint and follows its own TrainJob; evaluate rewrites its
# outputs; register finds the version its run registered (tags) instead of registering twice;
# finalize rewrites the summary. check-parameters is deterministic.
TASK_POLICY = {
    "check-parameters": (0, 10 * 60),
    "resolve-window": (1, 15 * 60),
    "preprocess-op": (1, int(3.5 * 3600)),
    "estimate-op": (2, 15 * 60),
    "train-op": (1, 8 * 3600),
    "evaluate-op": (1, 90 * 60),
    "register-op": (2, 20 * 60),
    "finalize": (2, 15 * 60),
}
BACKOFF_S, BACKOFF_FACTOR = 60, 2.0
SCHEDULE_PERIOD_S = 24 * 3600
"""The recurring run starts daily; with max concurrency 1 and no catch-up, a run still going when
the next one is due makes that day's run wait, and a wait past the one after skips a day."""
RUN_DEADLINE_S = 22 * 3600
"""A run's hard limit on a KFP backend (``PipelineConfig.active_deadline_seconds``: Argo stops it,
exit handler included): the worst case of its tasks (:func:`run_budget`) fits inside, and the next
day's run finds it gone."""


@dataclass(frozen=True)
class RunTTL:
    """How long a finished run's workflow -- its pods and their logs -- is kept, by outcome
    (``PipelineConfig``'s TTLs: Argo's ``ttlStrategy``). Short after success (its records are in
    the runs folder and MLflow), a week after failure: a run that failed on a Friday night can
    still be read on Monday (Argo's own default keeps a day whatever the outcome)."""

    success_s: int = 6 * 3600
    failure_s: int = 7 * 24 * 3600

    def __post_init__(self) -> None:
        for name in ("success_s", "failure_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ttl {name} must be whole seconds >= 0, got {value!r}")
            if value > 2**31 - 1:
                raise ValueError(f"ttl {name} must fit Argo's int32, got {value!r}")


DEFAULT_TTL = RunTTL()


def _waits(retries: int) -> float:
    return sum(BACKOFF_S * BACKOFF_FACTOR**i for i in range(retries))


def run_budget(trainjob) -> dict[str, float]:
    """Worst-case seconds of each task of a daily run, all attempts and backoffs included.

    ``trainjob``: the cluster's :class:`kube.types.TrainJobTarget`. The train task's attempts
    share the run's one TrainJob, whose age counts from its creation: together they take at most
    one TrainJob deadline, plus (for every retry) the queue or pending time of an attempt whose
    job never started; an attempt whose job failed for good ends the retries.
    """
    budget = {}
    for name, (retries, timeout) in TASK_POLICY.items():
        if name == "train-op":
            wait = max(trainjob.pending_timeout_s, trainjob.queue_timeout_s)
            budget[name] = (
                retries * wait + trainjob.timeout_s + 2 * trainjob.poll_s + _waits(retries)
            )
        else:
            budget[name] = (retries + 1) * timeout + _waits(retries)
    return budget


def harden(task, name: str, retries: bool = True):
    """The task's timeout and, where the runner retries, its retry policy with exponential backoff.

    Argo counts the retry window (``backoff_max_duration``) from the first attempt's start, so it
    covers every attempt at its full timeout plus the waits between them."""
    count, timeout = TASK_POLICY[name]
    kubernetes.set_timeout(task, timeout)
    if retries and count:
        waits = _waits(count)
        task.set_retry(
            count,
            backoff_duration=f"{BACKOFF_S}s",
            backoff_factor=BACKOFF_FACTOR,
            backoff_max_duration=f"{int(timeout * (count + 1) + waits)}s",
        )
    return task


def prepare_data(params, *, after=None, schedule_time: str = "", retries: bool = False):
    """The resolve-window and preprocess tasks every dailyrec pipeline starts with: ``(window, data)``.

    ``params`` holds the pipeline's parameters (channels) by name: ``raw_uri``, ``storage_root``,
    ``run_date``, ``window_days``, ``history_days``, ``seq_len``, ``run_id``, ``dask_workers``,
    ``cluster_target``; then the runner's schedule time and retry choice. Only preprocess is
    cached, keyed on the input fingerprint that the never-cached resolve task computes from
    today's files; it takes no artifact input, so that key stays the same from run to run.
    """
    window = resolve_window(
        raw_uri=params.raw_uri,
        storage_root=params.storage_root,
        run_date=params.run_date,
        schedule_time=schedule_time,
        window_days=params.window_days,
        history_days=params.history_days,
        seq_len=params.seq_len,
        run_id=params.run_id,
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
        window_days=params.window_days,
        history_days=params.history_days,
        seq_len=params.seq_len,
        input_fingerprint=window.outputs["input_fingerprint"],
        dask_workers=params.dask_workers,
        cluster_target=params.cluster_target,
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
