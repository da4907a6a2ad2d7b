"""The cluster backend of the launcher: one Kubeflow Trainer ``TrainJob`` per training run.

* :func:`build_trainjob` turns a :class:`LaunchSpec` + plan + :class:`ClusterTarget`
  into a TrainJob (``trainer.kubeflow.org/v1alpha1``) through the
  ``kubeflow-trainer-api`` models: runtimeRef to dailyrec's TrainingRuntime,
  numNodes / numProcPerNode / resourcesPerNode from the plan, torchrun running
  ``components.train`` with the same flags as locally, runtimePatches for the
  node pool (node selector, tolerations).
* :func:`assess` is the status-following logic as a pure function of what the
  API returned (conditions, events, pods, elapsed time): tested on sequences.
* :class:`TrainJobLauncher` is the small part that talks to the cluster: create
  (or adopt, when a retried task finds its own job), poll, surface the reason,
  delete on failure, timeout or cancellation.

The values (namespace, runtime name, node labels, GPU resource) are not here:
they come from ``pipelines/clusters/<env>.json`` as a :class:`ClusterTarget`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.plan import TrainPlan, read_plan
from components.common.progress import get_logger
from components.train.launch import LaunchError, LaunchSpec
from components.train.trainer import read_summary

log = get_logger(__name__)
GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
TRAINER_CONTAINER = "node"
"""The TrainingRuntime's replicated job and container name (Kubeflow Trainer's torch convention)."""
MANAGER = "dailyrec.io/launcher"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
# torchrun through our wrapper: a rank failing on a full disk makes the pod exit with NO_RETRY_EXIT,
# which the TrainingRuntime's podFailurePolicy turns into a failed JobSet instead of a restart
TRAINER_COMMAND = ["python", "-m", "components.train.torchrun", "--module", "components.train"]


@dataclass(frozen=True)
class ClusterTarget:
    """Where and how TrainJobs run: read from ``pipelines/clusters/<env>.json``."""

    namespace: str = "dailyrec"
    runtime: str = "dailyrec-torch"
    """Name of the (Cluster)TrainingRuntime the manifests install."""
    runtime_kind: str = "TrainingRuntime"
    image: str | None = None
    """Trainer image; None = the runtime's own."""
    accelerator: str | None = None
    """Extended resource per process, e.g. nvidia.com/gpu; None = CPU training."""
    cpu_per_node: str = "2"
    memory_per_node: str = "8Gi"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 6 * 3600
    """Whole-run limit (also the TrainJob's activeDeadlineSeconds)."""
    pending_timeout_s: float = 1800
    """Give up when no pod has started running for this long (unschedulable, image pull)."""
    poll_s: float = 15

    def __post_init__(self) -> None:
        if self.runtime_kind not in ("TrainingRuntime", "ClusterTrainingRuntime"):
            raise ValueError(f"runtime_kind must be TrainingRuntime or ClusterTrainingRuntime, "
                             f"got {self.runtime_kind!r}")
        for name in ("timeout_s", "pending_timeout_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")

    @classmethod
    def from_json(cls, text_or_path: str) -> ClusterTarget:
        """From a JSON object, or the path of a JSON file; unknown keys are an error."""
        text = Path(text_or_path).read_text() if not text_or_path.lstrip().startswith("{") else text_or_path
        doc = {k: v for k, v in json.loads(text).items() if not k.startswith("_")}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"cluster target: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**doc)


def trainjob_name(out: str) -> str:
    """Deterministic per training output folder: a retried task adopts its own job, the exit handler finds it."""
    return "dailyrec-" + hashlib.sha256(str(out).encode()).hexdigest()[:12]


def build_trainjob(spec: LaunchSpec, plan: TrainPlan, target: ClusterTarget,
                   labels: dict[str, str] | None = None) -> dict:
    """The TrainJob for one training run, as a plain dict ready for the Kubernetes API."""
    from kubeflow_trainer_api import models as m

    resources: dict[str, dict[str, Any]] = {"requests": {"cpu": target.cpu_per_node,
                                                         "memory": target.memory_per_node}}
    if target.accelerator:
        gpus = str(plan.nproc_per_node)
        resources["requests"][target.accelerator] = gpus
        resources["limits"] = {target.accelerator: gpus}
    env = {"PYTHONUNBUFFERED": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
           # no in-pod torchrun restarts (their shared static store can hang restarted workers):
           # the TrainingRuntime's JobSet failurePolicy recreates the pods, which resume from last.pt
           "PET_MAX_RESTARTS": "0", **target.env}
    patches = None
    if target.node_selector or target.tolerations:
        pod = m.TrainerV1alpha1PodTemplatePatch(spec=m.TrainerV1alpha1PodSpecPatch(
            node_selector=target.node_selector or None, tolerations=target.tolerations or None))
        replicated = m.TrainerV1alpha1ReplicatedJobPatch(
            name=TRAINER_CONTAINER,
            template=m.TrainerV1alpha1JobTemplatePatch(spec=m.TrainerV1alpha1JobSpecPatch(template=pod)))
        patches = [m.TrainerV1alpha1RuntimePatch(
            manager=MANAGER, training_runtime_spec=m.TrainerV1alpha1TrainingRuntimeSpecPatch(
                template=m.TrainerV1alpha1JobSetTemplatePatch(
                    spec=m.TrainerV1alpha1JobSetSpecPatch(replicated_jobs=[replicated]))))]
    job = m.TrainerV1alpha1TrainJob(
        api_version=f"{GROUP}/{VERSION}", kind="TrainJob",
        metadata={"name": trainjob_name(spec.out), "namespace": target.namespace,
                  "labels": {"app.kubernetes.io/part-of": "dailyrec", **(labels or {})}},
        spec=m.TrainerV1alpha1TrainJobSpec(
            runtime_ref=m.TrainerV1alpha1RuntimeRef(name=target.runtime, kind=target.runtime_kind,
                                                    api_group=GROUP),
            active_deadline_seconds=int(target.timeout_s),
            trainer=m.TrainerV1alpha1Trainer(
                image=target.image, num_nodes=plan.nnodes, num_proc_per_node=plan.nproc_per_node,
                resources_per_node=_quantities(m, resources),
                command=TRAINER_COMMAND, args=spec.trainer_args(),
                env=[{"name": k, "value": v} for k, v in sorted(env.items())]),
            runtime_patches=patches,
        ),
    )
    return job.to_dict()


def _quantities(m: Any, resources: dict[str, dict[str, str]]) -> dict:
    """The models want every quantity wrapped (a oneOf of string and number)."""
    quantity = m.IoK8sApimachineryPkgApiResourceQuantity
    return {kind: {name: quantity(actual_instance=value) for name, value in values.items()}
            for kind, values in resources.items()}


# ----------------------------------------------------------------------------- following


@dataclass(frozen=True)
class Verdict:
    state: str
    """running | succeeded | failed | timeout"""
    reason: str = ""


def assess(status: dict | None, events: list[dict], pods: list[dict], elapsed_s: float,
           pending_s: float, target: ClusterTarget) -> Verdict:
    """What a TrainJob's state means, from one observation of the API.

    ``status``: the TrainJob's ``.status``; ``events``: its and its pods'
    events (``type``, ``reason``, ``message``); ``pods``: ``.status`` of its
    pods; ``pending_s``: for how long no pod has been running.
    """
    conditions = {c.get("type"): c for c in (status or {}).get("conditions") or []
                  if str(c.get("status")) == "True"}
    if "Complete" in conditions:
        return Verdict("succeeded", conditions["Complete"].get("message", ""))
    warnings = [e for e in events if e.get("type") == "Warning"]
    if "Failed" in conditions:
        c = conditions["Failed"]
        detail = _pod_failure(pods) or (warnings[-1]["message"] if warnings else "")
        reason = f"{c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": ")
        return Verdict("failed", f"{reason}{f' ({detail})' if detail else ''}")
    if elapsed_s > target.timeout_s:
        return Verdict("timeout", f"still running after {elapsed_s:.0f}s (limit {target.timeout_s:.0f}s)")
    if pending_s > target.pending_timeout_s:
        cause = _pod_waiting(pods) or (f"{warnings[-1].get('reason')}: {warnings[-1].get('message')}"
                                       if warnings else "no pod was created")
        return Verdict("timeout", f"no pod running after {pending_s:.0f}s: {cause}")
    return Verdict("running")


def _pod_failure(pods: list[dict]) -> str:
    for pod in pods:
        for cs in pod.get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term and term.get("exitCode", 0) != 0:
                return f"container {cs.get('name')} exited {term.get('exitCode')} ({term.get('reason', '')})"
    return ""


def _pod_waiting(pods: list[dict]) -> str:
    for pod in pods:
        for cs in pod.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
                return f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    return ""


def any_running(pods: list[dict]) -> bool:
    return any(p.get("phase") in ("Running", "Succeeded") for p in pods)


# ----------------------------------------------------------------------------- the cluster side


class _Cancelled(Exception):
    pass


class TrainJobLauncher:
    """Create one TrainJob, follow it to the end, delete it unless it succeeded."""

    def __init__(self, target: ClusterTarget | None = None, apis: tuple[Any, Any] | None = None) -> None:
        import os

        self.target = target or ClusterTarget.from_json(os.environ.get("DAILYREC_CLUSTER_TARGET", "{}"))
        self._apis = apis

    def apis(self) -> tuple[Any, Any]:
        if self._apis is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            self._apis = (client.CustomObjectsApi(), client.CoreV1Api())
        return self._apis

    def run(self, spec: LaunchSpec) -> dict:
        plan = read_plan(spec.train.plan)[0] if spec.train.plan else TrainPlan()
        body = build_trainjob(spec, plan, self.target)
        name, ns = body["metadata"]["name"], self.target.namespace
        custom, core = self.apis()
        self._create_or_adopt(custom, body)
        log.info("TrainJob %s/%s: %d node(s) x %d process(es); logs: kubectl -n %s logs -f -l %s=%s",
                 ns, name, plan.nnodes, plan.nproc_per_node, ns, JOBSET_LABEL, name)
        previous = signal.signal(signal.SIGTERM, _raise_cancelled)  # KFP cancels a run with SIGTERM
        try:
            verdict = self._follow(custom, core, name)
        except (_Cancelled, KeyboardInterrupt):
            delete_trainjob(custom, ns, name)
            raise LaunchError(f"TrainJob {ns}/{name} cancelled; deleted") from None
        finally:
            signal.signal(signal.SIGTERM, previous)
        if verdict.state != "succeeded":
            tail = self._log_tail(core, name)
            delete_trainjob(custom, ns, name)
            raise LaunchError(f"TrainJob {ns}/{name} {verdict.state}: {verdict.reason}"
                              + (f"\nlast log lines:\n{tail}" if tail else ""))
        return read_summary(spec.out)

    def _create_or_adopt(self, custom: Any, body: dict) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, self.target.namespace, PLURAL, body)
        except ApiException as exc:
            if exc.status != 409:
                raise LaunchError(f"cannot create TrainJob {body['metadata']['name']}: "
                                  f"{exc.status} {exc.reason}: {exc.body}") from None
            log.info("TrainJob %s exists (a retried task): following it", body["metadata"]["name"])

    def _follow(self, custom: Any, core: Any, name: str) -> Verdict:
        ns, started = self.target.namespace, time.monotonic()
        running_since_start, last = None, None
        while True:
            job = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            pods = [p.to_dict()["status"] for p in
                    core.list_namespaced_pod(ns, label_selector=f"{JOBSET_LABEL}={name}").items]
            events = [e.to_dict() for e in core.list_namespaced_event(
                ns, field_selector=f"involvedObject.name={name}").items]
            elapsed = time.monotonic() - started
            if running_since_start is None and any_running(pods):
                running_since_start = elapsed
            pending = elapsed if running_since_start is None else 0.0
            verdict = assess(job.get("status"), events, _camel(pods), elapsed, pending, self.target)
            if verdict != last:
                log.info("TrainJob %s: %s%s", name, verdict.state, f" ({verdict.reason})" if verdict.reason else "")
                last = verdict
            if verdict.state != "running":
                return verdict
            time.sleep(self.target.poll_s)

    def _log_tail(self, core: Any, name: str, lines: int = 40) -> str:
        try:
            pods = core.list_namespaced_pod(self.target.namespace, label_selector=f"{JOBSET_LABEL}={name}").items
            if not pods:
                return ""
            return core.read_namespaced_pod_log(pods[0].metadata.name, self.target.namespace,
                                                container=TRAINER_CONTAINER, tail_lines=lines)
        except Exception as exc:  # logs are a courtesy; the verdict already says what failed
            return f"(logs unavailable: {type(exc).__name__})"


def delete_trainjob(custom: Any, namespace: str, name: str) -> bool:
    """Delete a TrainJob (foreground: its pods go too); False when it was already gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                               propagation_policy="Foreground")
        log.info("deleted TrainJob %s/%s", namespace, name)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def _raise_cancelled(signum, frame) -> None:
    raise _Cancelled()


def _camel(pods: list[dict]) -> list[dict]:
    """The Python client's snake_case pod status as the API's camelCase keys assess() reads."""
    def convert(value):
        if isinstance(value, dict):
            return {_to_camel(k): convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return [convert(p) for p in pods]


def _to_camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)
