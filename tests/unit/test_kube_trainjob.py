"""The TrainJob backend: what it builds, how it reads a job's state, what it sends to the API.

The API side is tested against the real ``kubernetes.client`` classes: APIs autospecced from
``CustomObjectsApi``/``CoreV1Api`` (a wrong method or argument fails as on a cluster) answering
with the client's own model objects (``V1Pod``, ``V1PodStatus``, ``CoreV1Event``), whose
``to_dict()`` is snake_case while the API (and :func:`kube.trainjob.assess`) speaks camelCase.
"""

from __future__ import annotations

import io
import json
from unittest.mock import create_autospec

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from components.common.plan import TrainPlan, write_plan
from components.common.train_summary import TrainSummary
from components.train.backend import LaunchError, LaunchSpec
from kube.client import LogFollower, TrainJobBackend, as_json
from kube.trainjob import Verdict, assess, build_trainjob, resources_per_node, trainjob_name
from kube.types import NodeProfile, TrainJobTarget, cluster_target
from kube.validate import crd_schemas, validate_objects

A100 = TrainJobTarget(
    accelerator="nvidia.com/gpu",
    node=NodeProfile(cpu="88", memory="600Gi", gpus=8),
    node_selector={"pool": "a100"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    env={"MLFLOW_TRACKING_URI": "http://mlflow:5000"},
    image="reg/dailyrec-trainer:abc",
)


def spec_for(tmp_path, **plan):
    path = write_plan(tmp_path / "plan.json", TrainPlan(**({"model": "prod"} | plan)))
    return LaunchSpec.of(
        data="/mnt/d/datasets/x",
        out=str(tmp_path / "train"),
        plan=str(path),
        tracking_uri="http://mlflow:5000",
        max_restarts=2,
    )


def test_trainjob_from_plan_and_target(tmp_path):
    spec = spec_for(tmp_path, nproc_per_node=8, nnodes=2, precision="bf16")
    job = build_trainjob(
        spec, TrainPlan(model="prod", nproc_per_node=8, nnodes=2), A100, {"run": "r1"}
    )
    assert job["metadata"]["name"] == trainjob_name(spec.out) and len(job["metadata"]["name"]) <= 63
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 8
    assert trainer["command"] == [
        "python",
        "-m",
        "components.train.node",
        "--module",
        "components.train",
    ]
    assert trainer["args"] == spec.trainer_args() and "--resume" in trainer["args"]
    # restarts on the cluster are the JobSet's (TrainingRuntime failurePolicy), never torchrun's
    assert {"name": "PET_MAX_RESTARTS", "value": "0"} in trainer["env"]
    # a node whose peers never join gives up after the target's rendezvous timeout
    assert {"name": "PET_RDZV_CONF", "value": "timeout=900"} in trainer["env"]
    assert job["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": "dailyrec-torch",
    }
    (patch,) = job["spec"]["runtimePatches"]
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = replicated["template"]["spec"]["template"]["spec"]
    assert replicated["name"] == "node" and pod["nodeSelector"] == {"pool": "a100"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    cpu = build_trainjob(spec, TrainPlan(nproc_per_node=2), TrainJobTarget())
    assert "resourcesPerNode" not in cpu["spec"]["trainer"] and "runtimePatches" not in cpu["spec"]


def test_a_whole_node_plan_takes_the_overlays_resources_and_a_smaller_one_its_share(tmp_path):
    spec = spec_for(tmp_path)
    # all 8 GPUs: no resourcesPerNode, so the TrainingRuntime's (the overlay's) resources apply
    assert resources_per_node(TrainPlan(nproc_per_node=8), A100) is None
    whole = build_trainjob(spec, TrainPlan(nproc_per_node=8), A100)
    assert "resourcesPerNode" not in whole["spec"]["trainer"]
    # one GPU: the node's share per GPU (88/8 CPU, 600Gi/8), requests = limits (Guaranteed)
    one = build_trainjob(spec, TrainPlan(nproc_per_node=1), A100)["spec"]["trainer"][
        "resourcesPerNode"
    ]
    assert (
        one["requests"] == one["limits"] == {"cpu": "11", "memory": "75Gi", "nvidia.com/gpu": "1"}
    )
    three = resources_per_node(TrainPlan(nproc_per_node=3), A100)
    assert three["limits"] == {"cpu": "33", "memory": "225Gi", "nvidia.com/gpu": "3"}
    odd = TrainJobTarget(
        accelerator="nvidia.com/gpu", node=NodeProfile(cpu="90", memory="500Gi", gpus=8)
    )
    assert resources_per_node(TrainPlan(nproc_per_node=1), odd)["requests"] == {
        "cpu": "11250m",
        "memory": "64000Mi",
        "nvidia.com/gpu": "1",
    }
    with pytest.raises(ValueError, match="16 GPUs per node requested; the node profile has 8"):
        build_trainjob(spec, TrainPlan(nproc_per_node=16), A100)


def test_the_a100_target_takes_its_node_pool_from_the_overlay():
    target = TrainJobTarget(**json.loads(cluster_target("a100"))["trainjob"])
    assert target.node == NodeProfile(cpu="88", memory="600Gi", gpus=8)
    assert target.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    assert target.accelerator == "nvidia.com/gpu"
    local = TrainJobTarget(**json.loads(cluster_target("local"))["trainjob"])
    assert local.accelerator is None and local.node_selector == {} and local.node.gpus == 0


def test_trainjob_validates_against_the_trainer_crd(tmp_path):
    schemas = crd_schemas()  # manifests/schemas/crds: shipped with the repo
    job = build_trainjob(spec_for(tmp_path), TrainPlan(nproc_per_node=1), A100)
    assert validate_objects([job], schemas) == ([], [])
    job["spec"]["trainer"]["numNodes"] = "two"
    (problem,) = validate_objects([job], schemas)[0]
    assert "'two' is not of type 'integer'" in problem and "spec/trainer/numNodes" in problem
    job = build_trainjob(spec_for(tmp_path), TrainPlan(nproc_per_node=8), A100)
    job["spec"]["podTemplateOverrides"] = []  # not a field of the Trainer 2.3 TrainJob
    (problem,) = validate_objects([job], schemas)[0]
    assert "'podTemplateOverrides' was unexpected" in problem


def test_cluster_target_from_json_refuses_unknown_keys():
    assert TrainJobTarget.from_json('{"namespace": "x", "_comment": "ok"}').namespace == "x"
    with pytest.raises(ValueError, match="unknown key.*gpus"):
        TrainJobTarget.from_json('{"gpus": 8}')


# ----------------------------------------------------------------------------- assess

FAST = TrainJobTarget(timeout_s=100, pending_timeout_s=10, poll_s=0.01)


def cond(kind, reason="", message=""):
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def pod(phase, **status):
    return {"metadata": {"name": "p-0"}, "status": {"phase": phase, **status}}


def test_assess_a_job_that_completes():
    assert assess(None, [], [], 1, 1, FAST) == Verdict("running")
    assert (
        assess({"conditions": [cond("Created")]}, [], [pod("Running")], 5, 0, FAST).state
        == "running"
    )
    assert assess(
        {"conditions": [cond("Complete", message="done")]}, [], [], 50, 0, FAST
    ) == Verdict("succeeded", "done")


def test_assess_a_failed_job_names_the_reason():
    pods = [
        pod(
            "Failed",
            containerStatuses=[
                {"name": "node", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        )
    ]
    verdict = assess(
        {"conditions": [cond("Failed", "JobFailed", "backoff limit exceeded")]},
        [],
        pods,
        60,
        0,
        FAST,
    )
    assert verdict.state == "failed"
    assert (
        "JobFailed: backoff limit exceeded" in verdict.reason
        and "exited 137 (OOMKilled)" in verdict.reason
    )


def test_assess_stuck_pending_names_the_cause():
    unschedulable = [
        pod(
            "Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ],
        )
    ]
    assert assess({}, [], unschedulable, 5, 5, FAST).state == "running"
    verdict = assess({}, [], unschedulable, 11, 11, FAST)
    assert (
        verdict.state == "timeout"
        and "Unschedulable: 0/3 nodes are available: 3 Insufficient" in verdict.reason
    )
    pulling = [
        pod(
            "Pending",
            containerStatuses=[
                {
                    "name": "node",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}},
                }
            ],
        )
    ]
    assert "ImagePullBackOff: not found" in assess({}, [], pulling, 11, 11, FAST).reason
    assert assess({}, [], [], 11, 11, FAST).reason.endswith("no pod was created")
    assert assess({}, [], [pod("Running")], 101, 0, FAST).state == "timeout"


# ----------------------------------------------------------------------------- the API, real client models


def container(name="node", **state):
    return k8s.V1ContainerStatus(
        name=name,
        image="reg/dailyrec-trainer:abc",
        image_id="",
        ready=False,
        restart_count=0,
        state=k8s.V1ContainerState(**state),
    )


def event(kind, reason, message, i=0):
    return k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(name=f"e{i}"),
        involved_object=k8s.V1ObjectReference(),
        type=kind,
        reason=reason,
        message=message,
    )


def real_apis(trainjob_answers, pod_status, events_by_object=None, pod_name="dailyrec-node-0-0"):
    """Autospecced APIs answering with the client's models; ``trainjob_answers``: statuses (dicts)
    or exceptions, in order, the last repeated."""
    custom = create_autospec(k8s.CustomObjectsApi, instance=True)
    answers = [a if isinstance(a, Exception) else {"status": a} for a in trainjob_answers]
    custom.get_namespaced_custom_object.side_effect = answers[:-1] + [answers[-1]] * 1000
    core = create_autospec(k8s.CoreV1Api, instance=True)
    v1pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=pod_name, uid="uid-1"), status=pod_status)
    core.list_namespaced_pod.return_value = k8s.V1PodList(items=[v1pod])
    events_by_object = events_by_object or {}

    def events(namespace, field_selector):
        involved = field_selector.split("=", 1)[1]
        return k8s.CoreV1EventList(
            items=[event(*e, i) for i, e in enumerate(events_by_object.get(involved, []))]
        )

    core.list_namespaced_event.side_effect = events
    core.read_namespaced_pod_log.return_value = (
        "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory"
    )
    return custom, core


def backend(custom, core, **target):
    sleeps = []
    made = TrainJobBackend(
        TrainJobTarget(**({"poll_s": 0.01, "namespace": "ns"} | target)),
        apis=(custom, core),
        sleep=sleeps.append,
        echo=lambda line: None,
    )
    return made, sleeps


def summary(tmp_path, auc):
    """What the TrainJob's rank 0 leaves on the shared volume."""
    (tmp_path / "train").mkdir(exist_ok=True)
    TrainSummary(epochs_run=1, best_val_auc=auc, rows_trained=10, seconds=1.0, world_size=2).write(
        tmp_path / "train"
    )


def test_the_client_models_are_read_in_the_apis_camel_case():
    """Negative control of the conversion: to_dict() says exit_code, the API (and assess) exitCode."""
    oom = k8s.V1Pod(
        status=k8s.V1PodStatus(
            phase="Failed",
            container_statuses=[
                container(
                    terminated=k8s.V1ContainerStateTerminated(exit_code=137, reason="OOMKilled")
                )
            ],
        )
    )
    assert "container_statuses" in oom.to_dict()["status"]
    converted = as_json(oom)
    assert converted["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    verdict = assess(
        {"conditions": [cond("Failed", "JobFailed", "x")]}, [], [converted], 1, 0, FAST
    )
    assert "exited 137 (OOMKilled)" in verdict.reason
    assert (
        "exited"
        not in assess(
            {"conditions": [cond("Failed", "JobFailed", "x")]}, [], [oom.to_dict()], 1, 0, FAST
        ).reason
    )


def test_a_failed_pod_names_its_exit_code_and_the_job_is_deleted(tmp_path):
    oom = k8s.V1PodStatus(
        phase="Failed",
        container_statuses=[
            container(terminated=k8s.V1ContainerStateTerminated(exit_code=137, reason="OOMKilled"))
        ],
    )
    custom, core = real_apis(
        [{}, {"conditions": [cond("Failed", "JobFailed", "backoff limit")]}], oom
    )
    launcher, _ = backend(custom, core)
    with pytest.raises(
        LaunchError,
        match=r"failed: JobFailed: backoff limit \(container node exited 137 "
        r"\(OOMKilled\)\)\nlast log lines:\n[\s\S]*CUDA out of memory",
    ):
        launcher.run(spec_for(tmp_path))
    name = trainjob_name(str(tmp_path / "train"))
    core.list_namespaced_pod.assert_any_call(
        "ns", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    )
    core.list_namespaced_event.assert_any_call("ns", field_selector=f"involvedObject.name={name}")
    custom.delete_namespaced_custom_object.assert_called_once_with(
        "trainer.kubeflow.org", "v1alpha1", "ns", "trainjobs", name, propagation_policy="Foreground"
    )


def test_an_unschedulable_pod_is_diagnosed_from_its_own_events(tmp_path):
    """FailedScheduling is an event on the pod (not the TrainJob), and such a pod has no
    container statuses: the backend fetches the pending pod's events."""
    pending = k8s.V1PodStatus(phase="Pending")
    custom, core = real_apis(
        [{}],
        pending,
        events_by_object={
            "dailyrec-node-0-0": [
                (
                    "Warning",
                    "FailedScheduling",
                    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                )
            ]
        },
    )
    launcher, _ = backend(custom, core, pending_timeout_s=0.05)
    with pytest.raises(
        LaunchError,
        match=r"timeout: no pod running after \d+s: FailedScheduling: 0/3 nodes are "
        r"available: 3 Insufficient nvidia.com/gpu\.",
    ):
        launcher.run(spec_for(tmp_path))
    core.list_namespaced_event.assert_any_call(
        "ns", field_selector="involvedObject.name=dailyrec-node-0-0"
    )
    custom.delete_namespaced_custom_object.assert_called_once()


def test_a_pod_stuck_pulling_its_image_is_named(tmp_path):
    pulling = k8s.V1PodStatus(
        phase="Pending",
        container_statuses=[
            container(
                waiting=k8s.V1ContainerStateWaiting(
                    reason="ImagePullBackOff", message='Back-off pulling image "reg/x"'
                )
            )
        ],
    )
    custom, core = real_apis([{}], pulling)
    launcher, _ = backend(custom, core, pending_timeout_s=0.05)
    with pytest.raises(
        LaunchError,
        match=r"timeout: no pod running after \d+s: ImagePullBackOff: "
        r"Back-off pulling image \"reg/x\"",
    ):
        launcher.run(spec_for(tmp_path))


def test_a_succeeded_job_is_deleted_after_its_results_are_collected(tmp_path):
    running = k8s.V1PodStatus(
        phase="Running", container_statuses=[container(running=k8s.V1ContainerStateRunning())]
    )
    summary(tmp_path, 0.71)
    custom, core = real_apis([{}, {}, {"conditions": [cond("Complete")]}], running)
    launcher, _ = backend(custom, core, pending_timeout_s=0.001)
    assert launcher.run(spec_for(tmp_path, nproc_per_node=1)).best_val_auc == 0.71
    ((args, kwargs),) = custom.create_namespaced_custom_object.call_args_list
    assert args[:4] == ("trainer.kubeflow.org", "v1alpha1", "ns", "trainjobs")
    custom.delete_namespaced_custom_object.assert_called_once_with(
        "trainer.kubeflow.org",
        "v1alpha1",
        "ns",
        "trainjobs",
        trainjob_name(str(tmp_path / "train")),
        propagation_policy="Foreground",
    )


def test_transient_api_errors_are_retried_with_backoff(tmp_path):
    summary(tmp_path, 0.7)
    running = k8s.V1PodStatus(phase="Running")
    custom, core = real_apis(
        [
            ApiException(status=503, reason="Service Unavailable"),
            ApiException(status=429, reason="Too Many Requests"),
            {"conditions": [cond("Complete")]},
        ],
        running,
    )
    launcher, sleeps = backend(custom, core, poll_s=1, api_retries=3)
    assert launcher.run(spec_for(tmp_path)).best_val_auc == 0.7
    assert sleeps == [1, 2]  # doubling backoff, then the answer


def test_an_api_that_stays_down_fails_the_task_and_deletes_the_job(tmp_path):
    custom, core = real_apis(
        [ApiException(status=503, reason="Service Unavailable")], k8s.V1PodStatus(phase="Running")
    )
    launcher, sleeps = backend(custom, core, poll_s=1, api_retries=2)
    with pytest.raises(
        LaunchError,
        match=r"following TrainJob dailyrec-\w+: the Kubernetes API failed 3 times "
        r"in a row; last: ApiException",
    ):
        launcher.run(spec_for(tmp_path))
    assert sleeps == [1, 2]
    custom.delete_namespaced_custom_object.assert_called_once()


def test_a_forbidden_answer_is_not_retried(tmp_path):
    custom, core = real_apis(
        [ApiException(status=403, reason="Forbidden")], k8s.V1PodStatus(phase="Running")
    )
    launcher, sleeps = backend(custom, core, poll_s=1, api_retries=5)
    with pytest.raises(ApiException, match="Forbidden"):
        launcher.run(spec_for(tmp_path))
    assert sleeps == [] and custom.delete_namespaced_custom_object.call_count == 1


def test_a_retried_task_adopts_its_own_job(tmp_path):
    summary(tmp_path, 0.7)
    custom, core = real_apis([{"conditions": [cond("Complete")]}], k8s.V1PodStatus(phase="Running"))
    custom.create_namespaced_custom_object.side_effect = ApiException(
        status=409, reason="AlreadyExists"
    )
    launcher, _ = backend(custom, core)
    assert launcher.run(spec_for(tmp_path)).best_val_auc == 0.7


def test_rank0_log_is_streamed_once_per_pod():
    core = create_autospec(k8s.CoreV1Api, instance=True)
    running = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="job-node-0-0", uid="a"),
        status=k8s.V1PodStatus(phase="Running"),
    )
    core.list_namespaced_pod.return_value = k8s.V1PodList(items=[running])
    core.read_namespaced_pod_log.side_effect = lambda *a, **k: io.BytesIO(
        b"epoch 1/3 loss 0.5\nepoch 2/3 loss 0.4\n"
    )
    lines = []
    follower = LogFollower(core, "ns", "job", lines.append)
    assert follower.follow_once() == 2
    assert lines == ["[rank 0] epoch 1/3 loss 0.5", "[rank 0] epoch 2/3 loss 0.4"]
    core.read_namespaced_pod_log.assert_called_once_with(
        "job-node-0-0", "ns", container="node", follow=True, _preload_content=False
    )
    assert core.list_namespaced_pod.call_args.kwargs["label_selector"] == (
        "jobset.sigs.k8s.io/jobset-name=job,jobset.sigs.k8s.io/replicatedjob-name=node,"
        "batch.kubernetes.io/job-completion-index=0"
    )
    assert follower.follow_once() == 0  # that pod's log is complete: not repeated
    restarted = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="job-node-0-0", uid="b"),
        status=k8s.V1PodStatus(phase="Running"),
    )
    core.list_namespaced_pod.return_value = k8s.V1PodList(items=[restarted])
    assert follower.follow_once() == 2  # a JobSet restart: the new pod is followed


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda t: t["spec"].__setitem__("runtimePatchez", t["spec"].pop("runtimePatches")),
            "'runtimePatchez' was unexpected",
        ),
        (
            lambda t: t["spec"]["trainer"].__setitem__(
                "numProcPerNod", t["spec"]["trainer"].pop("numProcPerNode")
            ),
            "'numProcPerNod' was unexpected",
        ),
        (
            lambda t: t["spec"]["trainer"].__setitem__("numProcPerNode", 0),
            "numProcPerNode must be greater than or equal to 1 (self >= 1) at /spec/trainer/numProcPerNode",
        ),
        (
            lambda t: t["metadata"].__setitem__("name", "Dailyrec_Job"),
            "metadata.name must match RFC 1035 DNS label format",
        ),
    ],
)
def test_strict_validation_refuses_misspelt_fields_and_broken_cel_rules(tmp_path, edit, problem):
    """kubectl --validate=strict refuses unknown fields; the API server evaluates the CRD's CEL rules."""
    schemas = crd_schemas()
    job = build_trainjob(spec_for(tmp_path), TrainPlan(nproc_per_node=1), A100)
    assert validate_objects([job], schemas) == ([], [])
    edit(job)
    problems, _ = validate_objects([job], schemas)
    assert any(problem in p for p in problems), problems


def sigterm_on_third_look(custom, workflow_spec):
    """The job runs; on the third look at it, SIGTERM arrives. The Argo Workflow of the run answers
    with ``workflow_spec`` (an exception: the API refuses)."""
    import os
    import signal

    looks = []

    def get(group, version, namespace, plural, name):
        if plural == "workflows":
            if isinstance(workflow_spec, Exception):
                raise workflow_spec
            return {"metadata": {"name": name}, "spec": workflow_spec}
        looks.append(1)
        if len(looks) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return {"status": {}}

    custom.get_namespaced_custom_object.side_effect = get
    return looks


RUNNING_POD = k8s.V1PodStatus(
    phase="Running", container_statuses=[container(running=k8s.V1ContainerStateRunning())]
)


def test_sigterm_of_a_cancelled_run_deletes_its_trainjob(tmp_path, monkeypatch):
    """KFP cancels a run by setting its Workflow's activeDeadlineSeconds to 0 (apiserver
    TerminateWorkflow); its exit handler may never run, so the launcher deletes the job itself."""
    import signal

    monkeypatch.setenv("KFP_WORKFLOW", "dailyrec-daily-abcde")
    custom, core = real_apis([{}], RUNNING_POD)
    looks = sigterm_on_third_look(custom, {"activeDeadlineSeconds": 0, "entrypoint": "x"})
    launcher, _ = backend(custom, core)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(LaunchError, match=r"TrainJob ns/\S+ cancelled; deleted"):
        launcher.run(spec_for(tmp_path))
    assert len(looks) == 3 and custom.create_namespaced_custom_object.call_count == 1
    custom.delete_namespaced_custom_object.assert_called_once_with(
        "trainer.kubeflow.org",
        "v1alpha1",
        "ns",
        "trainjobs",
        trainjob_name(str(tmp_path / "train")),
        propagation_policy="Foreground",
    )
    assert signal.getsignal(signal.SIGTERM) is before  # the process's own handling is given back


@pytest.mark.parametrize(
    "workflow",
    [
        {
            "entrypoint": "x"
        },  # a node drain: the run goes on, the task's next attempt adopts the job
        {"activeDeadlineSeconds": 3600},
        ApiException(status=403, reason="Forbidden"),  # cannot tell: never delete on a guess
        None,  # no workflow name in the pod's environment
    ],
)
def test_sigterm_of_a_run_that_goes_on_leaves_the_job_to_be_adopted(
    tmp_path, monkeypatch, workflow
):
    if workflow is None:
        monkeypatch.delenv("KFP_WORKFLOW", raising=False)
    else:
        monkeypatch.setenv("KFP_WORKFLOW", "dailyrec-daily-abcde")
    custom, core = real_apis([{}], RUNNING_POD)
    sigterm_on_third_look(custom, workflow or {})
    launcher, _ = backend(custom, core)
    with pytest.raises(LaunchError, match="left running for the task's next attempt") as caught:
        launcher.run(spec_for(tmp_path))
    assert not getattr(caught.value, "final", False)
    custom.delete_namespaced_custom_object.assert_not_called()


def test_a_queued_job_waits_without_counting_as_pending_then_names_its_queue(tmp_path):
    """Kueue suspends a TrainJob until its quota admits it (trainer's Suspended condition): that is
    neither a pod stuck pending nor a failure, and it is not final (the queue may admit it later)."""
    held = {"conditions": [cond("Suspended", "Suspended", "ClusterQueue a100 is full")]}
    custom, core = real_apis([held], k8s.V1PodStatus(phase="Pending"))
    core.list_namespaced_pod.return_value = k8s.V1PodList(items=[])
    launcher, sleeps = backend(custom, core, pending_timeout_s=1e-9, queue_timeout_s=0.05)
    with pytest.raises(
        LaunchError, match=r"timeout: still queued after .*ClusterQueue a100 is full"
    ):
        launcher.run(spec_for(tmp_path))
    assert len(sleeps) > 1  # it waited in the queue, although pending_timeout_s is tiny
    assert custom.delete_namespaced_custom_object.call_count == 1


def test_assess_reads_the_queue_and_the_deadline():
    held = {"conditions": [cond("Suspended", "Suspended", "quota")]}
    target = TrainJobTarget(pending_timeout_s=10, queue_timeout_s=100, timeout_s=1000)
    assert assess(held, [], [], 5000, 5000, target, queued_s=50) == Verdict(
        "queued", "Suspended: quota"
    )
    resumed = {"conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed"}]}
    assert assess(resumed, [], [], 1001, 0, target).state == "timeout"
    assert assess(resumed, [], [], 1001, 0, target).final  # its deadline is spent
    assert not assess(resumed, [], [], 20, 11, target).final  # never got a pod: may start later
    failed = {"conditions": [cond("Failed", "JobSetFailed", "restarts spent")]}
    assert assess(failed, [], [], 1, 0, target).final


def test_an_adopted_job_keeps_its_deadline_from_its_creation(tmp_path):
    """The TrainJob's activeDeadlineSeconds counts from its creationTimestamp (trainer
    reconcileDeadline): a retried task that adopts a job created long ago does not restart the clock."""
    import datetime as dt

    created = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    custom, core = real_apis([{}], RUNNING_POD)
    custom.get_namespaced_custom_object.side_effect = lambda *a, **k: {
        "metadata": {"creationTimestamp": created},
        "status": {},
    }
    custom.create_namespaced_custom_object.side_effect = ApiException(status=409)
    launcher, sleeps = backend(custom, core, timeout_s=6 * 3600)
    with pytest.raises(LaunchError, match=r"timeout: still running after 25\d\d\ds") as caught:
        launcher.run(spec_for(tmp_path))
    assert sleeps == [] and caught.value.final


def test_a_final_training_failure_is_not_launched_again_by_a_retried_task(tmp_path, monkeypatch):
    """KFP retries train (the launcher's pod may die); a TrainJob that failed after its JobSet
    restarts must not be launched a second time by that retry."""
    from components.common.attempts import FinalError, attempt

    monkeypatch.setenv("KFP_RUN_ID", "run-1")
    record = tmp_path / "stages" / "train.final.json"
    failed = {"conditions": [cond("Failed", "JobSetFailed", "CUDA out of memory")]}
    custom, core = real_apis([failed], RUNNING_POD)
    launcher, _ = backend(custom, core)
    with pytest.raises(LaunchError, match="CUDA out of memory"), attempt(record, "train"):
        launcher.run(spec_for(tmp_path))
    assert custom.create_namespaced_custom_object.call_count == 1
    with (
        pytest.raises(FinalError, match="not retried: .*CUDA out of memory"),
        attempt(record, "train"),
    ):
        launcher.run(spec_for(tmp_path))
    assert custom.create_namespaced_custom_object.call_count == 1  # no second launch
    monkeypatch.setenv("KFP_RUN_ID", "run-2")  # another run is not blocked
    with pytest.raises(LaunchError), attempt(record, "train"):
        launcher.run(spec_for(tmp_path))
    assert custom.create_namespaced_custom_object.call_count == 2
