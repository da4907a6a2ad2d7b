"""The exit handler reads kfp.local's and the KFP backend's status vocabularies alike."""

from __future__ import annotations

import json

import pytest

from components.common.final_status import final_status, stage_records
from components.common.run_summary import RunSummary
from components.common.runs import STAGES, claim_run_dir, record_stage
from kube.trainjob import trainjob_name
from pipelines.daily import finalize
from tests.conftest import call_exit_handler
from tests.run_records import run_record

FINAL = [
    ("SUCCEEDED", None, "SUCCEEDED"),  # kfp.local
    ("FAILED", "Task x failed.", "FAILED"),  # kfp.local, with its message
    ("COMPLETE", "", "SUCCEEDED"),  # KFP backend: MLMD states, message always empty
    ("CACHED", "", "SUCCEEDED"),
    ("FAILED", "", "FAILED"),
    ("CANCELED", "", "CANCELED"),
    ("CANCELLED", None, "CANCELED"),  # the SDK's documented spelling
]


@pytest.mark.parametrize(("state", "message", "status"), FINAL)
def test_a_final_state_decides_whatever_the_records_say(state, message, status):
    for done in ((), STAGES):
        outcome = final_status(state, message, done=done, stages=STAGES)
        assert outcome.status == status and outcome.decided_by == "backend"
        assert (outcome.error is None) == (status == "SUCCEEDED")


# What the KFP backend hands the exit handler (backend/src/v2/driver/resolve.go: the exit DAG's last
# known MLMD state). The DAG's state is recomputed only after a container task inside it finishes
# (launcher_v2.go -> UpdateDAGExecutionsState), one level deep before 2.17: a condition sub-DAG left
# the exit DAG RUNNING on successful runs. Such a state is no verdict: the stages' records decide.
BACKEND_CASES = [
    # (case, state, stages with a done-record, status, failed stage)
    ("2.17, every stage done", "COMPLETE", STAGES, "SUCCEEDED", None),
    ("2.14-2.16: exit DAG never recomputed", "RUNNING", STAGES, "SUCCEEDED", None),
    ("a not-blessed day behind a skipped sub-DAG", "RUNNING", STAGES, "SUCCEEDED", None),
    ("DAG not started in MLMD", "NEW", STAGES, "SUCCEEDED", None),
    ("train's pod died, DAG state stale", "RUNNING", STAGES[:2], "FAILED", "train"),
    ("nothing ran", "UNKNOWN", (), "FAILED", "preprocess"),
    ("empty state", "", STAGES[:4], "FAILED", "register"),
    ("a state no release spells", "SOMETHING_NEW", STAGES[:3], "FAILED", "evaluate"),
]


@pytest.mark.parametrize(("case", "state", "done", "status", "stage"), BACKEND_CASES)
def test_a_state_that_is_not_final_is_decided_by_the_runs_records(case, state, done, status, stage):
    outcome = final_status(state, "", done=done, stages=STAGES)
    assert (outcome.status, outcome.failed_stage) == (status, stage), case
    if state not in ("COMPLETE",):
        assert outcome.decided_by == "run records"
    if status == "FAILED":
        assert f"stage {stage} did not finish" in outcome.error and repr(state) in outcome.error


def test_failure_is_decided_without_the_message():
    assert (
        final_status("FAILED", "").error
        == "the run ended FAILED (the KFP backend gives no message: see the failed task's log)"
    )
    assert (
        final_status("FAILED", "Task preprocess-op failed.").error == "Task preprocess-op failed."
    )
    assert final_status("Weird", None).error == "the run ended in the state 'Weird'"


class Recorder:
    """The CustomObjectsApi the exit handler deletes the TrainJob with (``fail``: the API's answer)."""

    deleted: list = []
    fail: Exception | None = None

    def delete_namespaced_custom_object(
        self, group, version, namespace, plural, name, propagation_policy
    ):
        if Recorder.fail is not None:
            raise Recorder.fail
        Recorder.deleted.append((namespace, plural, name))


@pytest.fixture
def in_cluster(monkeypatch):
    from kubernetes import client, config

    Recorder.deleted, Recorder.fail = [], None
    monkeypatch.setattr(config, "load_incluster_config", lambda: None)
    monkeypatch.setattr(client, "CustomObjectsApi", Recorder)
    return Recorder


def run_finalize(root, state, message, launcher="trainjob", done=()):
    folder = root / "runs" / "r1"
    if not (folder / "owner.json").exists():
        claim_run_dir(folder, "kfp-1")
    for stage in done:
        record_stage(folder, stage, 1.0)
    call_exit_handler(
        finalize.python_func,
        root,
        state,
        message,
        launcher=launcher,
        cluster_target=json.dumps({"trainjob": {"namespace": "ns", "poll_s": 0.01}}),
    )
    return json.loads((folder / "summary.json").read_text())


def test_backend_failure_with_an_empty_message_deletes_the_trainjob(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "FAILED", "")
    assert summary["status"] == "FAILED" and summary["kfp_state"] == "FAILED"
    assert "the run ended FAILED" in summary["error"]
    name = trainjob_name(str(tmp_path / "runs" / "r1" / "train"))
    assert in_cluster.deleted == [("ns", "trainjobs", name)]
    assert summary["cleanup"] == {"state": "done", "errors": [], "trainjob": "deleted"}


def test_backend_cancel_deletes_the_trainjob_and_says_canceled(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "CANCELED", "")
    assert summary["status"] == "CANCELED" and len(in_cluster.deleted) == 1


def test_backend_success_is_reported_as_succeeded_and_keeps_the_job(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "COMPLETE", "", done=STAGES)
    assert (
        summary["status"] == "SUCCEEDED"
        and summary["error"] is None
        and summary["kfp_state"] == "COMPLETE"
    )
    assert in_cluster.deleted == []


def test_a_stale_running_state_after_every_stage_is_a_success_that_keeps_the_job(
    tmp_path, in_cluster
):
    summary = run_finalize(tmp_path, "RUNNING", "", done=STAGES)
    assert (summary["status"], summary["failed_stage"], summary["outcome_from"]) == (
        "SUCCEEDED",
        None,
        "run records",
    )
    assert summary["kfp_state"] == "RUNNING" and in_cluster.deleted == []


def test_a_running_state_with_a_stage_missing_fails_there_and_cleans_up(tmp_path, in_cluster):
    summary = run_finalize(tmp_path, "RUNNING", "", done=("preprocess", "estimate"))
    assert (summary["status"], summary["failed_stage"]) == ("FAILED", "train")
    assert "stage train did not finish" in summary["error"] and len(in_cluster.deleted) == 1


def test_records_an_earlier_run_of_the_same_id_left_do_not_count(tmp_path, in_cluster):
    folder = tmp_path / "runs" / "r1"
    claim_run_dir(folder, "kfp-0")
    for stage in STAGES:
        record_stage(folder, stage, 1.0)
    (folder / "summary.json").write_text("{}")  # that run finished
    claim_run_dir(folder, "kfp-1")  # a deliberate re-run of the same id takes the folder over
    assert stage_records(folder, STAGES) == {}
    summary = run_finalize(tmp_path, "RUNNING", "", done=("preprocess",))
    assert (summary["status"], summary["failed_stage"]) == ("FAILED", "estimate")


@pytest.mark.parametrize("status", [403, 500])
def test_the_summary_is_written_and_pushed_before_a_failing_cleanup(tmp_path, in_cluster, status):
    from kubernetes.client.exceptions import ApiException

    in_cluster.fail = ApiException(status=status, reason="Forbidden" if status == 403 else "boom")
    summary = run_finalize(tmp_path, "FAILED", "")
    assert summary["status"] == "FAILED" and summary["run_id"] == "r1"
    assert summary["cleanup"]["state"] == "failed" and summary["cleanup"]["trainjob"] == "failed"
    problem = summary["cleanup"]["errors"][0]
    # a 403 is final at once; a 5xx is retried with backoff first
    assert (
        f"ApiException {status}" in problem
        if status == 403
        else "failed 6 times in a row" in problem and f"({status})" in problem
    )


def test_finalize_pushes_the_outcome_before_cleaning_up(tmp_path):
    from pipelines.finalize import finalize_run

    claim_run_dir(tmp_path / "runs" / "r1", "kfp-1")
    order = []

    def deleter(train_out):
        assert json.loads((tmp_path / "runs" / "r1" / "summary.json").read_text())["status"]
        order.append("delete")
        raise RuntimeError("API down")

    summary = finalize_run(
        "FAILED",
        "",
        str(tmp_path),
        "r1",
        "kfp-1",
        "m",
        delete_trainjob=deleter,
        push=lambda s: order.append(("push", s.status)),
    )
    assert order == [("push", "FAILED"), "delete"]
    assert summary.cleanup["errors"] == ["deleting the TrainJob: RuntimeError: API down"]


OLD = 1_000_000_000.0


def finished_long_ago(root, rid: str):
    """A run folder whose summary was written at :data:`OLD` (a retention candidate)."""
    import os

    folder = claim_run_dir(root / "runs" / rid, f"kfp-{rid}")
    run_record(folder, rid)
    (folder / "summary.json").write_text("{}")
    os.utime(folder / "summary.json", (OLD, OLD))
    return folder


def finalize_with_retention(root, tracking_uri: str) -> RunSummary:
    from pipelines.finalize import finalize_run

    claim_run_dir(root / "runs" / "r1", "kfp-1")
    return finalize_run(
        "COMPLETE",
        "",
        str(root),
        "r1",
        "kfp-1",
        "m",
        tracking_uri=tracking_uri,
        retention_days=7,
        push=lambda s: None,
    )


@pytest.mark.integration
def test_finalize_applies_retention_keeping_the_registrys_champion_lineage(
    tmp_path, monkeypatch, tiny_dataset
):
    """The exit handler asks the registry which runs @champion and @previous came from (the tag
    the real register writes), and removes the rest of what is older than retention_days."""
    from tests.evaluations import register_forced

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    for rid in ("old-previous", "old-champion", "old-other"):
        finished_long_ago(tmp_path, rid)
    for version, rid in enumerate(("old-previous", "old-champion"), 1):
        window = {"start": "2025-12-01", "end": f"2025-12-1{version}"}  # two days, in turn
        out = tmp_path / rid / "evaluate"
        register_forced(
            tiny_dataset, out, uri, version, "m", window, version - 1 or None, pipeline_run_id=rid
        )
    summary = finalize_with_retention(tmp_path, uri)
    retention = summary.cleanup["retention"]
    assert retention["removed_runs"] == ["old-other"]
    assert sorted(retention["protected"]) == ["old-champion", "old-previous"]
    for kept in ("old-champion", "old-previous", "r1"):
        assert (tmp_path / "runs" / kept).is_dir()
    written = json.loads((tmp_path / "runs" / "r1" / "summary.json").read_text())
    assert written["cleanup"] == summary.cleanup


def test_retention_is_skipped_when_the_registry_cannot_say_what_the_champion_needs(tmp_path):
    folder = finished_long_ago(tmp_path, "old")
    summary = finalize_with_retention(tmp_path, "http://127.0.0.1:9")
    assert "registry is unreachable" in summary.cleanup["retention"]["skipped"]
    assert folder.is_dir()


@pytest.mark.parametrize("record", ["absent", "broken", "written"])
def test_finalize_reads_the_run_record_and_says_when_it_cannot(tmp_path, capsys, record):
    """The summary names the run's dataset from its run record; a run that failed before the
    window was resolved (or lost the record) still gets a summary, and a line says why it has
    no dataset."""
    from pipelines.finalize import finalize_run

    folder = claim_run_dir(tmp_path / "runs" / "r1", "kfp-1")
    if record == "broken":
        (folder / "run.json").write_text('{"data_dir": ')
    elif record == "written":
        run_record(folder, "r1", str(tmp_path / "datasets" / "d1"), raw_uri="/raw")
    summary = finalize_run("FAILED", "boom", str(tmp_path), "r1", "kfp-1", "m", push=lambda s: None)
    said = capsys.readouterr().out
    if record == "written":
        assert summary.dataset == str(tmp_path / "datasets" / "d1")
        assert "run.json" not in said
    else:
        assert summary.dataset == "" and summary.status == "FAILED"
        reason = "no run record" if record == "absent" else "unreadable"
        assert f"finalize: {folder / 'run.json'}: {reason}" in said
