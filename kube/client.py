"""The one module that talks to the Kubernetes API (``kubernetes`` client, dask-kubernetes).

* :class:`TrainJobBackend` -- the cluster's training backend: create (or adopt, when a retried
  task finds its own job) one TrainJob, follow it while streaming rank 0's log into this
  task's log, surface the reason of a failure, retry transient API errors with backoff, and
  delete the job at the end whatever happened (``ttlSecondsAfterFinished`` is not relied on:
  Kubeflow Trainer recreates a deleted JobSet and resets its restart budget).
* :func:`dask_cluster` -- a DaskCluster named by, labelled with and owned by this run.
* :func:`delete_trainjob` / :func:`run_trainjob_deleter` -- what the exit handler calls.

Why a hand-written follower and not the Kubeflow SDK's ``TrainerClient.get_job_logs(follow=True)``:
that call returns nothing while the pod is pending, then blocks in one ``watch`` of one pod's
log until the container exits -- it neither assesses the job meanwhile (pending timeout,
Failed condition, deadline) nor re-attaches to the new pod after a JobSet restart, and it wraps
every API error in ``RuntimeError`` (no way to retry transient ones). It would also add the
``kubeflow`` package next to kfp's pinned ``kubernetes`` client. The same API call
(``read_namespaced_pod_log(follow=True)``) runs here in a thread beside the status loop.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from components.common.plan import TrainPlan, read_plan
from components.common.progress import get_logger
from components.common.train_summary import TrainSummary
from components.train.backend import LaunchError, LaunchSpec, TrainingBackend
from kube import trainjob as tj
from kube.tasks import WORKFLOW_ENV
from kube.types import TRAINER_CONTAINER, DaskTarget, TrainJobTarget

log = get_logger(__name__)
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""API answers worth retrying (timeouts, throttling, an API server restarting)."""
MAX_BACKOFF_S = 300.0


def load_apis() -> tuple[Any, Any]:
    """(CustomObjectsApi, CoreV1Api) with in-cluster credentials, else the kube config."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi(), client.CoreV1Api()


def transient(exc: BaseException) -> bool:
    """An error a later call may not repeat: a dropped connection, or a 408/429/5xx answer."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def as_json(obj: Any) -> Any:
    """A client model as the API's JSON (camelCase keys: ``containerStatuses``, ``exitCode``).

    The models' ``to_dict()`` is snake_case; the client's own serializer maps each attribute
    back through its ``attribute_map``, as it does for requests.
    """
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


def with_retries(
    fn: Callable[[], Any],
    what: str,
    target: TrainJobTarget,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """``fn()``, retried with doubling backoff while it fails transiently (``api_retries`` times)."""
    delay = target.poll_s
    for attempt in range(target.api_retries + 1):
        try:
            return fn()
        except Exception as exc:
            if not transient(exc):
                raise
            if attempt == target.api_retries:
                raise LaunchError(
                    f"{what}: the Kubernetes API failed {attempt + 1} times in a row; "
                    f"last: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                ) from None
            log.warning(
                "%s: %s (attempt %d of %d); retrying in %.0fs",
                what,
                type(exc).__name__,
                attempt + 1,
                target.api_retries + 1,
                delay,
            )
            sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)
    raise AssertionError("unreachable")


class TrainJobFailed(LaunchError):
    """The TrainJob ended without success. ``final``: another TrainJob would repeat it (its JobSet
    restarts or its deadline are spent: :mod:`components.common.attempts`)."""

    def __init__(self, message: str, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


class _Cancelled(Exception):
    pass


def _raise_cancelled(signum, frame) -> None:
    raise _Cancelled()


class TrainJobBackend(TrainingBackend):
    """One TrainJob per training run, followed to the end and then deleted."""

    name = "trainjob"

    def __init__(
        self,
        target: TrainJobTarget,
        apis: tuple[Any, Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.target = target
        self._apis = apis
        self._sleep = sleep
        self._echo = echo

    @classmethod
    def from_cluster_target(cls, cluster_target: str) -> TrainJobBackend:
        """From the pipeline's ``cluster_target`` parameter (its ``trainjob`` block)."""
        import json

        return cls(TrainJobTarget(**json.loads(cluster_target)["trainjob"]))

    def apis(self) -> tuple[Any, Any]:
        if self._apis is None:
            self._apis = load_apis()
        return self._apis

    def run(self, spec: LaunchSpec) -> TrainSummary:
        plan = read_plan(spec.train.plan)[0] if spec.train.plan else TrainPlan()
        body = tj.build_trainjob(spec, plan, self.target)
        name, ns = body["metadata"]["name"], self.target.namespace
        custom, core = self.apis()
        self._create_or_adopt(custom, body)
        log.info(
            "TrainJob %s/%s: %d node(s) x %d process(es); rank 0's log follows",
            ns,
            name,
            plan.nnodes,
            plan.nproc_per_node,
        )
        follower = LogFollower(core, ns, name, self._echo, poll_s=self.target.poll_s)
        follower.start()
        previous = signal.signal(signal.SIGTERM, _raise_cancelled)  # KFP cancels a run with SIGTERM
        try:
            verdict = self._follow(custom, core, name)
        except (_Cancelled, KeyboardInterrupt):
            if self.run_cancelled(custom):
                delete_trainjob(custom, ns, name)
                raise LaunchError(f"TrainJob {ns}/{name} cancelled; deleted") from None
            # a node drain or an eviction of this pod: the job is healthy, and the task's next
            # attempt adopts it (the name is the run's); the exit handler deletes it if none comes
            raise LaunchError(
                f"TrainJob {ns}/{name}: this launcher was stopped (SIGTERM) while the run goes on; "
                f"the job is left running for the task's next attempt to adopt"
            ) from None
        except Exception:  # the API stayed down or refused: do not leave the job running for hours
            self._delete_quietly(custom, name)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            follower.stop()
        if verdict.state != "succeeded":
            tail = self._log_tail(core, name)
            self._delete_quietly(custom, name)
            raise TrainJobFailed(
                f"TrainJob {ns}/{name} {verdict.state}: {verdict.reason}"
                + (f"\nlast log lines:\n{tail}" if tail else ""),
                # failed = its JobSet restarts are spent, timeout = its deadline is: a new TrainJob
                # would repeat it; a job that never left the queue or never got a pod may start later
                final=verdict.final,
            )
        summary = TrainSummary.read(spec.out)  # collected first: the job's pods go with it
        self._delete_quietly(custom, name)
        return summary

    def run_cancelled(self, custom: Any) -> bool:
        """Whether this task's KFP run was cancelled: KFP terminates a run by setting its Argo
        Workflow's ``activeDeadlineSeconds`` to 0 (apiserver ``TerminateWorkflow``), Argo's own stop
        sets ``spec.shutdown``. Unknown (no workflow name, the API refuses): False, so a healthy
        job is never deleted on a guess; its own deadline and the exit handler bound it."""
        import os

        workflow = os.environ.get(WORKFLOW_ENV)
        if not workflow:
            return False
        try:
            doc = custom.get_namespaced_custom_object(
                "argoproj.io", "v1alpha1", self.target.namespace, "workflows", workflow
            )
        except Exception as exc:
            log.warning("cannot read workflow %s to tell a cancel from a drain: %s", workflow, exc)
            return False
        spec = (doc or {}).get("spec") or {}
        return spec.get("activeDeadlineSeconds") == 0 or bool(spec.get("shutdown"))

    def _create_or_adopt(self, custom: Any, body: dict) -> None:
        from kubernetes.client.exceptions import ApiException

        name = body["metadata"]["name"]
        try:
            self._call(
                lambda: custom.create_namespaced_custom_object(
                    tj.GROUP, tj.VERSION, self.target.namespace, tj.PLURAL, body
                ),
                f"create TrainJob {name}",
            )
        except ApiException as exc:
            if exc.status != 409:
                raise LaunchError(
                    f"cannot create TrainJob {name}: {exc.status} {exc.reason}: "
                    f"{' '.join(str(exc.body).split())[:300]}"
                ) from None
            log.info("TrainJob %s exists (a retried task): following it", name)

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        return with_retries(fn, what, self.target, self._sleep)

    def observe(
        self, custom: Any, core: Any, name: str
    ) -> tuple[dict | None, list[dict], list[dict], float | None]:
        """(TrainJob status, pods, events, seconds since the job's creation) as the API's JSON: the
        job's own events and those of every pod not yet running (the scheduler reports on the pod,
        not the job)."""
        ns = self.target.namespace
        job = custom.get_namespaced_custom_object(tj.GROUP, tj.VERSION, ns, tj.PLURAL, name)
        pods = [
            as_json(p)
            for p in core.list_namespaced_pod(ns, label_selector=f"{tj.JOBSET_LABEL}={name}").items
        ]
        events = []
        for involved in (name, *tj.pending_pods(pods)):
            events += [
                as_json(e)
                for e in core.list_namespaced_event(
                    ns, field_selector=f"involvedObject.name={involved}"
                ).items
            ]
        return job.get("status"), pods, events, tj.age_s(job.get("metadata"))

    def _follow(self, custom: Any, core: Any, name: str) -> tj.Verdict:
        """Poll the job until its verdict. Its age counts from its creation (an adopted job has
        been running for a while); time spent queued (``Suspended``) is not time spent pending."""
        started = time.monotonic()
        running_since_start, queued, pending, last_seen, last = None, 0.0, 0.0, None, None
        while True:
            status, pods, events, created = self._call(
                lambda: self.observe(custom, core, name), f"following TrainJob {name}"
            )
            now = time.monotonic()
            elapsed = created if created is not None else now - started
            step = 0.0 if last_seen is None else now - last_seen
            last_seen = now
            if running_since_start is None and tj.any_running(pods):
                running_since_start = elapsed
            if tj.suspended(status):
                queued += step
            elif running_since_start is None:
                pending += step
            verdict = tj.assess(status, events, pods, elapsed, pending, self.target, queued)
            if verdict != last:
                log.info(
                    "TrainJob %s: %s%s",
                    name,
                    verdict.state,
                    f" ({verdict.reason})" if verdict.reason else "",
                )
                last = verdict
            if verdict.state not in ("running", "queued"):
                return verdict
            self._sleep(self.target.poll_s)

    def _delete_quietly(self, custom: Any, name: str) -> None:
        try:
            self._call(
                lambda: delete_trainjob(custom, self.target.namespace, name),
                f"delete TrainJob {name}",
            )
        except Exception as exc:  # the verdict is what matters; say what is left behind
            log.warning(
                "TrainJob %s/%s could not be deleted (%s): delete it with kubectl -n %s delete "
                "trainjob %s",
                self.target.namespace,
                name,
                type(exc).__name__,
                self.target.namespace,
                name,
            )

    def _log_tail(self, core: Any, name: str, lines: int = 40) -> str:
        try:
            pods = core.list_namespaced_pod(
                self.target.namespace, label_selector=rank0_selector(name)
            ).items
            if not pods:
                return ""
            return core.read_namespaced_pod_log(
                pods[0].metadata.name,
                self.target.namespace,
                container=TRAINER_CONTAINER,
                tail_lines=lines,
            )
        except Exception as exc:  # logs are a courtesy; the verdict already says what failed
            return f"(logs unavailable: {type(exc).__name__})"


def rank0_selector(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in {tj.JOBSET_LABEL: name, **tj.RANK0_LABELS}.items())


class LogFollower:
    """Streams rank 0's log into this process's output while a TrainJob runs.

    Attaches to the pod of node 0 once it runs, re-attaches to its successor after a JobSet
    restart (a new pod uid), and never repeats a pod it has streamed to its end.
    """

    def __init__(
        self, core: Any, namespace: str, name: str, echo: Callable[[str], None], poll_s: float = 15
    ) -> None:
        self.core, self.namespace, self.name, self.echo, self.poll_s = (
            core,
            namespace,
            name,
            echo,
            poll_s,
        )
        self.done: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"logs-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.follow_once()
            except Exception as exc:  # logs are a courtesy: the status loop decides the outcome
                log.debug("log stream of %s: %s", self.name, exc)
            self._stop.wait(self.poll_s)

    def follow_once(self) -> int:
        """Stream the current rank-0 pod's log to its end if it runs and was not streamed yet;
        returns the lines echoed."""
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=rank0_selector(self.name)
        ).items
        lines = 0
        for pod in pods:
            uid = pod.metadata.uid or pod.metadata.name
            if uid in self.done or (pod.status.phase not in ("Running", "Succeeded", "Failed")):
                continue
            stream = self.core.read_namespaced_pod_log(
                pod.metadata.name,
                self.namespace,
                container=TRAINER_CONTAINER,
                follow=True,
                _preload_content=False,
            )
            try:
                for raw in stream:
                    self.echo(f"[rank 0] {raw.decode(errors='replace').rstrip()}")
                    lines += 1
                    if self._stop.is_set():
                        return lines
            finally:
                stream.close()
            self.done.add(uid)  # the container ended: its log is complete
        return lines


def delete_trainjob(custom: Any, namespace: str, name: str) -> bool:
    """Delete a TrainJob (foreground: its pods go too); False when it was already gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        custom.delete_namespaced_custom_object(
            tj.GROUP, tj.VERSION, namespace, tj.PLURAL, name, propagation_policy="Foreground"
        )
        log.info("deleted TrainJob %s/%s", namespace, name)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def run_trainjob_deleter(
    cluster_target: str, custom: Any = None, sleep: Callable[[float], None] = time.sleep
) -> Callable[[str], bool]:
    """The exit handler's cleanup, for :func:`pipelines.finalize.finalize_run`: a function that
    deletes the TrainJob of a run's training folder (True when it existed), retrying transient API
    errors with backoff and raising the last error otherwise (the caller records it)."""
    import json

    target = TrainJobTarget(**json.loads(cluster_target)["trainjob"])

    def delete(train_out: str) -> bool:
        api = custom if custom is not None else load_apis()[0]
        name = tj.trainjob_name(train_out)
        return with_retries(
            lambda: delete_trainjob(api, target.namespace, name),
            f"delete TrainJob {name}",
            target,
            sleep,
        )

    return delete


# ----------------------------------------------------------------------------- Dask


def run_identity(environ: dict[str, str] | None = None) -> tuple[str, dict[str, str] | None]:
    """(run id, owner reference of this task's pod) from the pod's environment.

    ``KFP_RUN_ID`` is set from the pod's ``pipeline/runid`` label (kube.tasks), ``KFP_POD_NAME`` /
    ``KFP_POD_UID`` by KFP itself; outside KFP the run id is the process id, and no owner.
    """
    import os

    env = os.environ if environ is None else environ
    owner = None
    if env.get("KFP_POD_NAME") and env.get("KFP_POD_UID"):
        owner = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": env["KFP_POD_NAME"],
            "uid": env["KFP_POD_UID"],
            "blockOwnerDeletion": False,
            "controller": False,
        }
    return env.get("KFP_RUN_ID") or env.get("KFP_POD_NAME") or f"pid-{os.getpid()}", owner


@contextlib.contextmanager
def dask_cluster(
    target: DaskTarget,
    workers: int,
    run_id: str | None = None,
    owner: dict[str, str] | None = None,
    scratch: str | None = None,
) -> Iterator[Any]:
    """A DaskCluster for this run for the duration of the block (deleted afterwards, also on errors).

    Named by the run id and labelled with it; owned by this task's pod, so Kubernetes deletes it
    with the pod if this process dies first. Never connects to an existing cluster: one with this
    name can only be an earlier attempt of this same run (a retried task), and is replaced.
    """
    from dask_kubernetes.operator import KubeCluster
    from dask_kubernetes.operator.kubecluster.kubecluster import CreateMode

    from kube.dask import cluster_name, cluster_spec

    if run_id is None:
        run_id, owner = run_identity()
    name = cluster_name(run_id)
    spec = cluster_spec(name, workers, target, run_id=run_id, owner=owner, scratch=scratch)
    _delete_leftover_dask(target.namespace, name)

    def start() -> Any:
        return KubeCluster(
            custom_cluster_spec=spec,
            namespace=target.namespace,
            shutdown_on_close=True,
            create_mode=CreateMode.CREATE_ONLY,
            resource_timeout=target.start_timeout_s,
        )

    cluster = start_bounded(
        start, target.start_timeout_s, lambda: _not_ready(target.namespace, name, target)
    )
    try:
        yield cluster
    finally:
        cluster.close()


class DaskStartError(RuntimeError):
    """The DaskCluster's scheduler did not become ready in time; the message says what each pod
    waits for."""


def start_bounded(start: Callable[[], Any], timeout_s: float, diagnose: Callable[[], str]) -> Any:
    """``start()`` in a daemon thread, given ``timeout_s``: dask-kubernetes waits for ever for a
    scheduler pod that runs but never becomes Ready (a sidecar kept from istiod). On time-out,
    ``diagnose()`` (which cleans up and says why) becomes the error."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["cluster"] = start()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="dask-start", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise DaskStartError(diagnose())
    if "error" in box:
        raise box["error"]
    return box["cluster"]


def _not_ready(namespace: str, name: str, target: DaskTarget, core: Any = None) -> str:
    """What the cluster's pods wait for, then the cluster deleted (it must not linger)."""
    try:
        core = core or load_apis()[1]
        pods = [
            as_json(p)
            for p in core.list_namespaced_pod(
                namespace, label_selector=f"dask.org/cluster-name={name}"
            ).items
        ]
        why = tj.pod_problem(pods) or (
            "no pod was created (is the dask-kubernetes operator running?)" if not pods else ""
        )
    except Exception as exc:
        why = f"(pods unreadable: {type(exc).__name__})"
    with contextlib.suppress(Exception):
        _delete_leftover_dask(namespace, name)
    return (
        f"DaskCluster {namespace}/{name}: the scheduler was not ready after "
        f"{target.start_timeout_s}s: {why or 'no reason reported'}; the cluster was deleted"
    )


def _delete_leftover_dask(namespace: str, name: str) -> None:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    with contextlib.suppress(config.ConfigException):
        config.load_incluster_config()
    try:
        client.CustomObjectsApi().delete_namespaced_custom_object(
            "kubernetes.dask.org",
            "v1",
            namespace,
            "daskclusters",
            name,
            propagation_policy="Foreground",
        )
        log.info(
            "deleted DaskCluster %s/%s left by an earlier attempt of this run", namespace, name
        )
    except ApiException as exc:
        if exc.status == 404:
            return
        raise
    for _ in range(60):  # foreground deletion: gone once its pods are
        try:
            client.CustomObjectsApi().get_namespaced_custom_object(
                "kubernetes.dask.org", "v1", namespace, "daskclusters", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(2)
    raise RuntimeError(
        f"DaskCluster {namespace}/{name} of an earlier attempt is still being deleted"
    )


@contextlib.contextmanager
def preprocess_cluster(cluster_target: str, workers: int, config: Any) -> Iterator[str]:
    """The preprocess task's DaskCluster (the ``dask`` block of the pipeline's ``cluster_target``),
    sized from the window's input: yields its scheduler address for the stage.

    Fails before any pod starts when the dataset would not fit in the volume's free space
    (:func:`kube.dask.check_space`, with the numbers); each worker's scratch gets twice its share
    of the input.
    """
    import json
    import shutil
    from pathlib import Path

    from components.preprocess.stage import resolve_inputs
    from kube.dask import check_space, scratch_limit

    target = DaskTarget(**json.loads(cluster_target)["dask"])
    files = resolve_inputs(config).files
    by_format: dict[str, int] = {}
    for f in files:
        fmt = "parquet" if str(f.name).endswith(".parquet") else "csv"
        by_format[fmt] = by_format.get(fmt, 0) + int(f.size)
    volume = Path(config.out)
    while not volume.exists() and volume != volume.parent:
        volume = volume.parent
    check_space(by_format, shutil.disk_usage(volume).free, config.seq_len, where=str(volume))
    with dask_cluster(
        target, workers, scratch=scratch_limit(sum(by_format.values()), workers)
    ) as cluster:
        yield cluster.scheduler_address
