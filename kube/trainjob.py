"""Kubeflow Trainer ``TrainJob``: the pure part (builders and readers; no API calls here).

* :func:`build_trainjob` turns a :class:`LaunchSpec` + plan + :class:`TrainJobTarget` into a
  TrainJob (``trainer.kubeflow.org/v1alpha1``) through the ``kubeflow-trainer-api`` models:
  runtimeRef to dailyrec's TrainingRuntime, numNodes / numProcPerNode from the plan, torchrun
  running ``components.train`` with the same flags as locally, runtimePatches for the node pool.
* :func:`resources_per_node` sizes a pod from the node profile: a plan that takes every GPU of
  the node gets the overlay's own resources (no ``resourcesPerNode``: the TrainingRuntime's
  apply); one that takes fewer gets the node's share per GPU, requests = limits.
* :func:`assess` reads one observation of the API (TrainJob status, pods, events, in the API's
  camelCase JSON) into a :class:`Verdict`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from components.common.plan import TrainPlan
from components.train.backend import LaunchSpec
from kube.types import TRAINER_CONTAINER, TrainJobTarget

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
MANAGER = "dailyrec.io/launcher"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RANK0_LABELS = {
    "jobset.sigs.k8s.io/replicatedjob-name": TRAINER_CONTAINER,
    "batch.kubernetes.io/job-completion-index": "0",
}
"""JobSet's labels on the pod of node 0, where rank 0 logs (also Katib's primary pod)."""
# torchrun through our node entry: a rank failing on a full disk makes the pod exit with
# NO_RETRY_EXIT, which the TrainingRuntime's podFailurePolicy turns into a failed JobSet instead
# of a restart; a rendezvous whose nodes never all join fails in one line after its timeout
TRAINER_COMMAND = ["python", "-m", "components.train.node", "--module", "components.train"]


def trainjob_name(out: str) -> str:
    """Deterministic per training output folder: a retried task adopts its own job, the exit handler finds it."""
    return "dailyrec-" + hashlib.sha256(str(out).encode()).hexdigest()[:12]


def resources_per_node(plan: TrainPlan, target: TrainJobTarget) -> dict[str, dict[str, str]] | None:
    """The TrainJob's ``resourcesPerNode``, or None to let the TrainingRuntime's (the overlay's) apply.

    CPU training and a plan that takes all of a node's GPUs use the runtime's resources as the
    overlay sets them. A plan on fewer GPUs gets that many GPUs and the node's CPU and memory in
    proportion (88 CPU / 600Gi / 8 GPUs -> 11 CPU / 75Gi per GPU), requests = limits so the pod is
    Guaranteed and never steals a co-scheduled job's share.
    """
    if not target.accelerator:
        return None
    gpus = plan.nproc_per_node
    if gpus == target.node.gpus:
        return None
    cpu, memory = target.node.share(gpus)  # ValueError when the plan wants more than a node has
    sized = {"cpu": cpu, "memory": memory, target.accelerator: str(gpus)}
    return {"requests": dict(sized), "limits": dict(sized)}


def _placement_patches(m, target: TrainJobTarget) -> list | None:
    """The runtime patch that places the trainer's pods (node selector, tolerations); None when
    the target places nothing. ``m`` is the Trainer API's models module."""
    if not (target.node_selector or target.tolerations):
        return None
    pod = m.TrainerV1alpha1PodTemplatePatch(
        spec=m.TrainerV1alpha1PodSpecPatch(
            node_selector=target.node_selector or None, tolerations=target.tolerations or None
        )
    )
    replicated = m.TrainerV1alpha1ReplicatedJobPatch(
        name=TRAINER_CONTAINER,
        template=m.TrainerV1alpha1JobTemplatePatch(
            spec=m.TrainerV1alpha1JobSpecPatch(template=pod)
        ),
    )
    return [
        m.TrainerV1alpha1RuntimePatch(
            manager=MANAGER,
            training_runtime_spec=m.TrainerV1alpha1TrainingRuntimeSpecPatch(
                template=m.TrainerV1alpha1JobSetTemplatePatch(
                    spec=m.TrainerV1alpha1JobSetSpecPatch(replicated_jobs=[replicated])
                )
            ),
        )
    ]


def build_trainjob(
    spec: LaunchSpec, plan: TrainPlan, target: TrainJobTarget, labels: dict[str, str] | None = None
) -> dict:
    """The TrainJob for one training run, as a plain dict ready for the Kubernetes API."""
    from kubeflow_trainer_api import models as m

    resources = resources_per_node(plan, target)
    env = {
        "PYTHONUNBUFFERED": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        # no in-pod torchrun restarts (their shared static store can hang restarted workers):
        # the TrainingRuntime's JobSet failurePolicy recreates the pods, which resume from last.pt
        "PET_MAX_RESTARTS": "0",
        # a node whose peers never join (a pod never scheduled) gives up after this, in one line
        "PET_RDZV_CONF": f"timeout={int(target.rendezvous_timeout_s)}",
        **target.env,
    }
    job = m.TrainerV1alpha1TrainJob(
        api_version=f"{GROUP}/{VERSION}",
        kind="TrainJob",
        metadata={
            "name": trainjob_name(spec.out),
            "namespace": target.namespace,
            "labels": {"app.kubernetes.io/part-of": "dailyrec", **(labels or {})},
        },
        spec=m.TrainerV1alpha1TrainJobSpec(
            runtime_ref=m.TrainerV1alpha1RuntimeRef(
                name=target.runtime, kind=target.runtime_kind, api_group=GROUP
            ),
            active_deadline_seconds=int(target.timeout_s),
            trainer=m.TrainerV1alpha1Trainer(
                image=target.image,
                num_nodes=plan.nnodes,
                num_proc_per_node=plan.nproc_per_node,
                resources_per_node=_quantities(m, resources) if resources else None,
                command=TRAINER_COMMAND,
                args=spec.trainer_args(),
                env=[{"name": k, "value": v} for k, v in sorted(env.items())],
            ),
            runtime_patches=_placement_patches(m, target),
        ),
    )
    return job.to_dict()


def _quantities(m: Any, resources: dict[str, dict[str, str]]) -> dict:
    """The models want every quantity wrapped (a oneOf of string and number)."""
    quantity = m.IoK8sApimachineryPkgApiResourceQuantity
    return {
        kind: {name: quantity(actual_instance=value) for name, value in values.items()}
        for kind, values in resources.items()
    }


# ----------------------------------------------------------------------------- reading the API


@dataclass(frozen=True)
class Verdict:
    state: str
    """running | queued | succeeded | failed | timeout"""
    reason: str = ""
    final: bool = False
    """A new TrainJob would repeat it: the job failed after its JobSet restarts, or used its
    deadline (components.common.attempts). A job that never got a pod or never left its queue
    is not final: it may start later."""


def suspended(status: dict | None) -> bool:
    """The TrainJob is suspended (held by a queue such as Kueue): trainer's ``Suspended`` condition."""
    return any(
        c.get("type") == "Suspended" and str(c.get("status")) == "True"
        for c in (status or {}).get("conditions") or []
    )


def age_s(metadata: dict | None, now: float | None = None) -> float | None:
    """Seconds since the object's ``creationTimestamp`` (None when it has none): the TrainJob's
    ``activeDeadlineSeconds`` counts from there (trainer ``reconcileDeadline``)."""
    import datetime as dt
    import time

    stamp = (metadata or {}).get("creationTimestamp")
    if not stamp:
        return None
    created = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    return max(0.0, (time.time() if now is None else now) - created.timestamp())


def assess(
    status: dict | None,
    events: list[dict],
    pods: list[dict],
    elapsed_s: float,
    pending_s: float,
    target: TrainJobTarget,
    queued_s: float = 0.0,
) -> Verdict:
    """What a TrainJob's state means, from one observation of the API.

    ``status``: the TrainJob's ``.status``; ``pods``: its pods as the API returns them
    (``{"metadata": ..., "status": ...}``, camelCase); ``events``: the events of the TrainJob
    and of those pods (the scheduler's ``FailedScheduling`` is an event on the pod);
    ``pending_s``: for how long no pod has been running while the job was not queued;
    ``queued_s``: for how long it was suspended by a queue (Kueue), which is neither pending nor
    failing: it waits up to ``queue_timeout_s``.
    """
    conditions = {
        c.get("type"): c
        for c in (status or {}).get("conditions") or []
        if str(c.get("status")) == "True"
    }
    if "Complete" in conditions:
        return Verdict("succeeded", conditions["Complete"].get("message", ""))
    warnings = [e for e in events if e.get("type") == "Warning"]
    if "Failed" in conditions:
        c = conditions["Failed"]
        detail = _pod_failure(pods) or (warnings[-1].get("message", "") if warnings else "")
        reason = f"{c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": ")
        return Verdict("failed", f"{reason}{f' ({detail})' if detail else ''}", final=True)
    if suspended(status):
        c = next(c for c in status.get("conditions") or [] if c.get("type") == "Suspended")
        why = f"{c.get('reason') or 'Suspended'}: {c.get('message') or 'held by its queue'}"
        if queued_s > target.queue_timeout_s:
            return Verdict(
                "timeout",
                f"still queued after {queued_s:.0f}s (limit {target.queue_timeout_s:.0f}s; {why})",
            )
        return Verdict("queued", why)
    if elapsed_s > target.timeout_s:
        return Verdict(
            "timeout",
            f"still running after {elapsed_s:.0f}s (limit {target.timeout_s:.0f}s)",
            final=True,
        )
    if pending_s > target.pending_timeout_s:
        cause = (
            _pod_waiting(pods)
            or _unschedulable(pods)
            or (
                f"{warnings[-1].get('reason')}: {warnings[-1].get('message')}"
                if warnings
                else "no pod was created"
                if not pods
                else "pods pending, no reason reported"
            )
        )
        return Verdict("timeout", f"no pod running after {pending_s:.0f}s: {cause}")
    return Verdict("running")


def _statuses(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _pod_failure(pods: list[dict]) -> str:
    for pod in pods:
        for cs in _statuses(pod):
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get(
                "terminated"
            )
            if term and term.get("exitCode", 0) != 0:
                return f"container {cs.get('name')} exited {term.get('exitCode')} ({term.get('reason', '')})"
    return ""


def _pod_waiting(pods: list[dict]) -> str:
    for pod in pods:
        for cs in _statuses(pod):
            waiting = (cs.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason") not in (
                None,
                "ContainerCreating",
                "PodInitializing",
            ):
                return f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    return ""


def _unschedulable(pods: list[dict]) -> str:
    """The scheduler's verdict on a pod it cannot place: its PodScheduled condition (no container
    statuses exist yet)."""
    for pod in pods:
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and str(c.get("status")) == "False":
                return f"{c.get('reason') or 'Unschedulable'}: {c.get('message', '')}".rstrip(": ")
    return ""


def any_running(pods: list[dict]) -> bool:
    return any((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods)


def pending_pods(pods: list[dict]) -> list[str]:
    """Names of the pods not yet running: whose events explain why."""
    return [
        p["metadata"]["name"]
        for p in pods
        if (p.get("status") or {}).get("phase") in (None, "Pending")
    ]


def pod_problem(pods: list[dict]) -> str:
    """Why pods are not ready, in one line per pod (unschedulable, a waiting container, containers
    not ready such as an injected ``istio-proxy``); empty when every pod is ready."""
    lines = []
    for pod in pods:
        status = pod.get("status") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        why = _unschedulable([pod]) or _pod_waiting([pod]) or _pod_failure([pod])
        if not why:
            waiting = [
                cs.get("name")
                for cs in status.get("containerStatuses") or []
                if not cs.get("ready")
            ]
            if waiting:
                why = f"containers not ready: {', '.join(waiting)}" + (
                    " (an injected Istio sidecar: the pod needs sidecar.istio.io/inject=false)"
                    if "istio-proxy" in waiting
                    else ""
                )
        ready = any(
            c.get("type") == "Ready" and str(c.get("status")) == "True"
            for c in status.get("conditions") or []
        )
        if why or not ready:
            lines.append(f"pod {name} {status.get('phase') or 'Pending'}: {why or 'not ready'}")
    return "; ".join(lines)
