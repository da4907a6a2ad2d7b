"""The exit handler reads kfp.local's and the KFP backend's status vocabularies alike."""

from __future__ import annotations

import json

import pytest
from kfp import dsl

from components.common.final_status import final_status
from kube.trainjob import trainjob_name
from pipelines.daily import finalize


@pytest.mark.parametrize(
    ("state", "message", "status", "failed"),
    [
        ("SUCCEEDED", None, "SUCCEEDED", False),  # kfp.local
        ("FAILED", "Task x failed.", "FAILED", True),  # kfp.local, with its message
        ("COMPLETE", "", "SUCCEEDED", False),  # KFP backend: MLMD states, message always empty
        ("CACHED", "", "SUCCEEDED", False),
        ("FAILED", "", "FAILED", True),
        ("CANCELED", "", "CANCELED", True),
        ("CANCELLED", None, "CANCELED", True),  # the SDK's documented spelling
        ("RUNNING", "", "FAILED", True),  # not finished when the handler ran: clean up
        ("SOMETHING_NEW", "", "FAILED", True),
    ],
)
def test_both_vocabularies_map_to_one(state, message, status, failed):
    outcome = final_status(state, message)
    assert (outcome.status, outcome.failed) == (status, failed)
    assert (outcome.error is None) == (not failed)


def test_failure_is_decided_without_the_message():
    assert (
        final_status("FAILED", "").error
        == "the run ended FAILED (the KFP backend gives no message: see the failed task's log)"
    )
    assert (
        final_status("FAILED", "Task preprocess-op failed.").error == "Task preprocess-op failed."
    )
    assert final_status("Weird", None).error == "the run ended in the unknown state 'Weird'"


class Recorder:
    """The CustomObjectsApi the exit handler deletes the TrainJob with."""

    deleted: list = []

    def delete_namespaced_custom_object(
        self, group, version, namespace, plural, name, propagation_policy
    ):
        Recorder.deleted.append((namespace, plural, name))


@pytest.fixture
def in_cluster(monkeypatch):
    from kubernetes import client, config

    Recorder.deleted = []
    monkeypatch.setattr(config, "load_incluster_config", lambda: None)
    monkeypatch.setattr(client, "CustomObjectsApi", Recorder)
    return Recorder


def run_finalize(root, state, message, launcher="trainjob"):
    status = dsl.PipelineTaskFinalStatus(
        state=state,
        pipeline_job_resource_name="run-1",
        pipeline_task_name="exit-handler-1",
        error_code=None,
        error_message=message,
    )
    finalize.python_func(
        status=status,
        storage_root=str(root),
        run_id="r1",
        kfp_run_id="kfp-1",
        model_name="m",
        launcher=launcher,
        cluster_target=json.dumps({"trainjob": {"namespace": "ns"}}),
    )
    return json.loads((root / "runs" / "r1" / "summary.json").read_text())


def test_backend_failure_with_an_empty_message_deletes_the_trainjob(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "FAILED", "")
    assert summary["status"] == "FAILED" and summary["kfp_state"] == "FAILED"
    assert "the run ended FAILED" in summary["error"]
    name = trainjob_name(str(tmp_path / "runs" / "r1" / "train"))
    assert in_cluster.deleted == [("ns", "trainjobs", name)]


def test_backend_cancel_deletes_the_trainjob_and_says_canceled(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "CANCELED", "")
    assert summary["status"] == "CANCELED" and len(in_cluster.deleted) == 1


def test_backend_success_is_reported_as_succeeded_and_keeps_the_job(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "COMPLETE", "")
    assert (
        summary["status"] == "SUCCEEDED"
        and summary["error"] is None
        and summary["kfp_state"] == "COMPLETE"
    )
    assert in_cluster.deleted == []
