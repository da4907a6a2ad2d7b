"""The TrainJob backend: what it builds, how it reads a job's state, what it sends to the API."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from components.common.plan import TrainPlan, write_plan
from components.train.launch import LaunchError, LaunchSpec
from components.train.trainjob import (
    ClusterTarget,
    TrainJobLauncher,
    Verdict,
    assess,
    build_trainjob,
    trainjob_name,
)
from pipelines.validate import crd_schemas, validate_objects

A100 = ClusterTarget(accelerator="nvidia.com/gpu", cpu_per_node="88", memory_per_node="1000Gi",
                     node_selector={"pool": "a100"},
                     tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                     env={"MLFLOW_TRACKING_URI": "http://mlflow:5000"}, image="reg/dailyrec-trainer:abc")


def spec_for(tmp_path, **plan):
    path = write_plan(tmp_path / "plan.json", TrainPlan(**({"model": "prod"} | plan)))
    return LaunchSpec.of(data="/mnt/d/datasets/x", out=str(tmp_path / "train"), plan=str(path),
                         tracking_uri="http://mlflow:5000", max_restarts=2)


def test_trainjob_from_plan_and_target(tmp_path):
    spec = spec_for(tmp_path, nproc_per_node=8, nnodes=2, precision="bf16")
    job = build_trainjob(spec, TrainPlan(model="prod", nproc_per_node=8, nnodes=2), A100, {"run": "r1"})
    assert job["metadata"]["name"] == trainjob_name(spec.out) and len(job["metadata"]["name"]) <= 63
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 8
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "8"}
    assert trainer["command"] == ["python", "-m", "components.train.torchrun", "--module", "components.train"]
    assert trainer["args"] == spec.trainer_args() and "--resume" in trainer["args"]
    # restarts on the cluster are the JobSet's (TrainingRuntime failurePolicy), never torchrun's
    assert {"name": "PET_MAX_RESTARTS", "value": "0"} in trainer["env"]
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                         "name": "dailyrec-torch"}
    (patch,) = job["spec"]["runtimePatches"]
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = replicated["template"]["spec"]["template"]["spec"]
    assert replicated["name"] == "node" and pod["nodeSelector"] == {"pool": "a100"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    cpu = build_trainjob(spec, TrainPlan(nproc_per_node=2), ClusterTarget())
    assert "limits" not in cpu["spec"]["trainer"]["resourcesPerNode"] and "runtimePatches" not in cpu["spec"]


def test_trainjob_validates_against_the_trainer_crd(tmp_path):
    schemas = crd_schemas()  # manifests/schemas/crds: shipped with the repo
    job = build_trainjob(spec_for(tmp_path), TrainPlan(nproc_per_node=8), A100)
    assert validate_objects([job], schemas) == ([], [])
    job["spec"]["trainer"]["numNodes"] = "two"
    (problem,) = validate_objects([job], schemas)[0]
    assert "'two' is not of type 'integer'" in problem and "spec/trainer/numNodes" in problem
    job = build_trainjob(spec_for(tmp_path), TrainPlan(nproc_per_node=8), A100)
    job["spec"]["podTemplateOverrides"] = []  # not a field of the Trainer 2.3 TrainJob
    (problem,) = validate_objects([job], schemas)[0]
    assert "'podTemplateOverrides' was unexpected" in problem


def test_cluster_target_from_json_refuses_unknown_keys():
    assert ClusterTarget.from_json('{"namespace": "x", "_comment": "ok"}').namespace == "x"
    with pytest.raises(ValueError, match="unknown key.*gpus"):
        ClusterTarget.from_json('{"gpus": 8}')


# ----------------------------------------------------------------------------- assess

FAST = ClusterTarget(timeout_s=100, pending_timeout_s=10, poll_s=0.01)


def cond(kind, reason="", message=""):
    return {"type": kind, "status": "True", "reason": reason, "message": message}


def test_assess_a_job_that_completes():
    assert assess(None, [], [], 1, 1, FAST) == Verdict("running")
    assert assess({"conditions": [cond("Created")]}, [], [{"phase": "Running"}], 5, 0, FAST).state == "running"
    assert assess({"conditions": [cond("Complete", message="done")]}, [], [], 50, 0, FAST) == \
        Verdict("succeeded", "done")


def test_assess_a_failed_job_names_the_reason():
    pods = [{"phase": "Failed", "containerStatuses": [
        {"name": "node", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}]
    verdict = assess({"conditions": [cond("Failed", "JobFailed", "backoff limit exceeded")]}, [], pods, 60, 0, FAST)
    assert verdict.state == "failed"
    assert "JobFailed: backoff limit exceeded" in verdict.reason and "exited 137 (OOMKilled)" in verdict.reason


def test_assess_stuck_pending_times_out_with_the_scheduler_message():
    events = [{"type": "Normal", "reason": "Created", "message": "ok"},
              {"type": "Warning", "reason": "FailedScheduling",
               "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]
    assert assess({}, events, [{"phase": "Pending"}], 5, 5, FAST).state == "running"
    verdict = assess({}, events, [{"phase": "Pending"}], 11, 11, FAST)
    assert verdict.state == "timeout" and "Insufficient nvidia.com/gpu" in verdict.reason
    pulling = [{"phase": "Pending", "containerStatuses": [
        {"name": "node", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}]
    assert "ImagePullBackOff: not found" in assess({}, [], pulling, 11, 11, FAST).reason
    assert assess({}, [], [{"phase": "Running"}], 101, 0, FAST).state == "timeout"


# ----------------------------------------------------------------------------- the API side


class FakeCustom:
    """Records what the launcher sends; answers with a scripted sequence of TrainJob statuses."""

    def __init__(self, statuses, exists=False):
        self.statuses, self.exists, self.created, self.deleted = list(statuses), exists, [], []

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        if self.exists:
            raise ApiException(status=409, reason="AlreadyExists")
        self.created.append((group, version, namespace, plural, body))

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        return {"status": self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, propagation_policy):
        self.deleted.append((namespace, name, propagation_policy))


class FakeCore:
    def __init__(self, phase="Running"):
        self.phase = phase

    def list_namespaced_pod(self, namespace, label_selector):
        from kubernetes import client as k8s

        return k8s.V1PodList(items=[k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p-0"),
                                              status=k8s.V1PodStatus(phase=self.phase))])

    def list_namespaced_event(self, namespace, field_selector):
        from kubernetes import client as k8s

        return k8s.CoreV1EventList(items=[])

    def read_namespaced_pod_log(self, name, namespace, container, tail_lines):
        return "Traceback ...\nRuntimeError: boom"


def test_launcher_creates_follows_and_returns_the_summary(tmp_path):
    spec = spec_for(tmp_path, nproc_per_node=8)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "train_summary.json").write_text(json.dumps({"best_val_auc": 0.7}))
    custom = FakeCustom([{}, {"conditions": [cond("Complete")]}])
    launcher = TrainJobLauncher(ClusterTarget(poll_s=0.01, namespace="ns"), apis=(custom, FakeCore()))
    assert launcher.run(spec) == {"best_val_auc": 0.7}
    ((group, version, namespace, plural, body),) = custom.created
    assert (group, version, namespace, plural) == ("trainer.kubeflow.org", "v1alpha1", "ns", "trainjobs")
    assert body["spec"]["trainer"]["numProcPerNode"] == 8 and custom.deleted == []


def test_launcher_deletes_a_failed_job_and_raises_its_reason(tmp_path):
    custom = FakeCustom([{"conditions": [cond("Failed", "JobFailed", "rank 3 exited")]}])
    launcher = TrainJobLauncher(ClusterTarget(poll_s=0.01, namespace="ns"), apis=(custom, FakeCore("Failed")))
    with pytest.raises(LaunchError, match=r"failed: JobFailed: rank 3 exited[\s\S]*RuntimeError: boom"):
        launcher.run(spec_for(tmp_path))
    assert custom.deleted == [("ns", trainjob_name(str(tmp_path / "train")), "Foreground")]


def test_launcher_adopts_its_own_job_after_a_task_retry_and_times_out_when_unschedulable(tmp_path):
    custom = FakeCustom([{}], exists=True)
    target = ClusterTarget(poll_s=0.01, pending_timeout_s=0.05, namespace="ns")
    launcher = TrainJobLauncher(target, apis=(custom, FakeCore("Pending")))
    with pytest.raises(LaunchError, match="timeout: no pod running"):
        launcher.run(spec_for(tmp_path))
    assert custom.created == [] and len(custom.deleted) == 1


# ----------------------------------------------------------------------------- real client models
# What the Kubernetes Python client really returns: model objects whose to_dict() is snake_case
# (container_statuses, exit_code). The APIs are autospecced from the real classes, so a call with
# a wrong name or argument fails here as it would against the cluster.


def real_apis(trainjob_statuses, pod_status, events=()):
    from unittest.mock import create_autospec

    from kubernetes import client as k8s

    custom = create_autospec(k8s.CustomObjectsApi, instance=True)
    custom.get_namespaced_custom_object.side_effect = (
        [{"status": s} for s in trainjob_statuses[:-1]] + [{"status": trainjob_statuses[-1]}] * 1000)
    core = create_autospec(k8s.CoreV1Api, instance=True)
    pod = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="dailyrec-node-0-0"), status=pod_status)
    core.list_namespaced_pod.return_value = k8s.V1PodList(items=[pod])
    core.list_namespaced_event.return_value = k8s.CoreV1EventList(items=[
        k8s.CoreV1Event(metadata=k8s.V1ObjectMeta(name=f"e{i}"), involved_object=k8s.V1ObjectReference(),
                        type=kind, reason=reason, message=message)
        for i, (kind, reason, message) in enumerate(events)])
    core.read_namespaced_pod_log.return_value = "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory"
    return custom, core


def container(name="node", **state):
    from kubernetes import client as k8s

    return k8s.V1ContainerStatus(name=name, image="reg/dailyrec-trainer:abc", image_id="", ready=False,
                                 restart_count=0, state=k8s.V1ContainerState(**state))


def test_a_failed_pod_from_the_real_client_names_its_exit_code(tmp_path):
    from kubernetes import client as k8s

    oom = k8s.V1PodStatus(phase="Failed", container_statuses=[
        container(terminated=k8s.V1ContainerStateTerminated(exit_code=137, reason="OOMKilled"))])
    custom, core = real_apis([{}, {"conditions": [cond("Failed", "JobFailed", "backoff limit")]}], oom)
    launcher = TrainJobLauncher(ClusterTarget(poll_s=0.01, namespace="ns"), apis=(custom, core))
    with pytest.raises(LaunchError, match=r"failed: JobFailed: backoff limit \(container node exited 137 "
                                          r"\(OOMKilled\)\)\nlast log lines:\n[\s\S]*CUDA out of memory"):
        launcher.run(spec_for(tmp_path))
    name = trainjob_name(str(tmp_path / "train"))
    core.list_namespaced_pod.assert_called_with("ns", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
    core.list_namespaced_event.assert_called_with("ns", field_selector=f"involvedObject.name={name}")
    custom.delete_namespaced_custom_object.assert_called_once_with(
        "trainer.kubeflow.org", "v1alpha1", "ns", "trainjobs", name, propagation_policy="Foreground")


def test_a_pod_stuck_pulling_its_image_from_the_real_client_is_named(tmp_path):
    from kubernetes import client as k8s

    pulling = k8s.V1PodStatus(phase="Pending", container_statuses=[
        container(waiting=k8s.V1ContainerStateWaiting(reason="ImagePullBackOff",
                                                      message='Back-off pulling image "reg/x"'))])
    custom, core = real_apis([{}], pulling, events=[("Normal", "Scheduled", "assigned")])
    launcher = TrainJobLauncher(ClusterTarget(poll_s=0.01, pending_timeout_s=0.05, namespace="ns"),
                                apis=(custom, core))
    with pytest.raises(LaunchError, match=r"timeout: no pod running after \d+s: ImagePullBackOff: "
                                          r"Back-off pulling image \"reg/x\""):
        launcher.run(spec_for(tmp_path))


def test_a_running_pod_from_the_real_client_counts_as_running(tmp_path):
    from kubernetes import client as k8s

    running = k8s.V1PodStatus(phase="Running", container_statuses=[
        container(running=k8s.V1ContainerStateRunning())])
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "train_summary.json").write_text(json.dumps({"best_val_auc": 0.71}))
    custom, core = real_apis([{}, {}, {"conditions": [cond("Complete")]}], running,
                             events=[("Warning", "FailedScheduling", "0/3 nodes available")])
    launcher = TrainJobLauncher(ClusterTarget(poll_s=0.01, pending_timeout_s=0.001, namespace="ns"),
                                apis=(custom, core))
    assert launcher.run(spec_for(tmp_path)) == {"best_val_auc": 0.71}
    custom.delete_namespaced_custom_object.assert_not_called()


def test_sigterm_to_the_launcher_deletes_its_trainjob(tmp_path):
    """A cancelled KFP run may never run its exit handler (the workflow's deadline is set to 0); the
    launcher pod gets SIGTERM, and its own handler is then the only thing that deletes the TrainJob."""
    import os
    import signal

    class Cancelled(FakeCustom):
        """The job runs; on the third look at it, KFP's SIGTERM arrives."""

        looks = 0

        def get_namespaced_custom_object(self, *args):
            self.looks += 1
            if self.looks == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().get_namespaced_custom_object(*args)

    custom = Cancelled([{}])
    launcher = TrainJobLauncher(ClusterTarget(poll_s=0.01, namespace="ns"), apis=(custom, FakeCore()))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(LaunchError, match=r"TrainJob ns/\S+ cancelled; deleted"):
        launcher.run(spec_for(tmp_path))
    assert len(custom.created) == 1 and custom.looks == 3
    assert custom.deleted == [("ns", trainjob_name(str(tmp_path / "train")), "Foreground")]
    assert signal.getsignal(signal.SIGTERM) is before  # the process's own handling is given back
