"""The TrainJob backend: what it builds, how it reads a job's state, what it sends to the API."""

from __future__ import annotations

import json
from types import SimpleNamespace

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
    assert trainer["command"] == ["torchrun", "--module", "components.train"]
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
        pod = SimpleNamespace(metadata=SimpleNamespace(name="p-0"),
                              to_dict=lambda: {"status": {"phase": self.phase, "container_statuses": None}})
        return SimpleNamespace(items=[pod])

    def list_namespaced_event(self, namespace, field_selector):
        return SimpleNamespace(items=[])

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
