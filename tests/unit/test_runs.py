"""The run folder and its summary: built from whatever the stages left, failures included."""

from __future__ import annotations

import json
import re
import time

import pytest

from components.common.evaluation import Decision
from components.common.plan import TrainPlan, write_plan
from components.common.registration import Registration
from components.common.run_summary import RunSummary, RunSummaryError
from components.common.runs import claim_run_dir, record_stage
from components.common.storage import atomic_write_json
from tests.meta_docs import meta_document


def test_summary_of_a_run_that_failed_in_training(tmp_path):
    raw, data, run = tmp_path / "raw", tmp_path / "data", tmp_path / "run"
    atomic_write_json(
        raw / "_datagen.json", {"oracle_auc": {"2026-01-04": 0.70, "2026-01-05": 0.80}}
    )
    window = {"start": "2026-01-03", "end": "2026-01-05", "test_days": "2026-01-05 .. 2026-01-05"}
    atomic_write_json(data / "meta.json", meta_document(fingerprint="f" * 64, window=window))
    record_stage(run, "preprocess", 1.5)
    record_stage(run, "estimate", 0.25)
    write_plan(run / "plan.json", TrainPlan(model="debug", nproc_per_node=2))
    summary = RunSummary.build(run, data, str(raw), "ctr", "r1", status="FAILED", error="boom")
    assert summary.failed_stage == "train" and summary.run_date == "2026-01-05"
    assert summary.dataset_rows == {"train": 10, "val": 3, "test": 4}
    assert summary.oracle_auc == 0.8  # the test day only
    assert summary.stage_seconds == {
        "preprocess": 1.5,
        "estimate": 0.25,
        "train": None,
        "evaluate": None,
        "register": None,
    }
    assert summary.total_seconds == 1.75 and summary.plan["nproc_per_node"] == 2
    assert summary.test_auc is None and summary.blessed is None
    text = summary.text()
    assert "FAILED in stage train (boom)" in text and "debug on 2 process(es)" in text
    assert RunSummary.read(summary.write(run)) == summary  # machine-readable, read back whole


def test_not_blessed_run_is_not_a_register_failure(tmp_path):
    run = tmp_path / "run"
    for stage in ("preprocess", "estimate", "train", "evaluate"):
        record_stage(run, stage, 1.0)
    Decision(blessed=False, reasons=("x",), rule={}, champion_version=3).write(run / "evaluate")
    summary = RunSummary.build(run, tmp_path / "none", "", "ctr", "r2")
    assert summary.failed_stage is None and summary.champion_version == 3
    assert summary.model_version is None and summary.oracle_auc is None
    assert summary.decision_reasons == ("x",)
    text = summary.text()
    assert "NOT BLESSED" in text and "nothing registered; champion = v3" in text
    assert summary.model_card is None and "card " not in text


def test_the_summary_links_the_registered_versions_card(tmp_path):
    run = tmp_path / "run"
    for stage in ("preprocess", "estimate", "train", "evaluate", "register"):
        record_stage(run, stage, 1.0)
    card = "runs:/0123abcd/model_card/model_card.md"
    Registration("ctr", "k" * 64, True, registered=True, version=4, model_card=card).write(run)
    summary = RunSummary.build(run, tmp_path / "none", "", "ctr", "r3")
    assert summary.model_card == card and summary.model_version == 4
    assert f"  card     {card}" in summary.text().splitlines()


def test_the_summary_counts_only_this_runs_stage_records_and_says_where_training_started(
    tmp_path,
):
    run = tmp_path / "run"
    record_stage(run, "preprocess", 4.0)  # an earlier run of the same id got this far
    time.sleep(0.01)
    claim_run_dir(run, "kfp-2")
    warm = {"asked": True, "version": "3", "applied": True, "line": "from ctr v3's weights"}
    record_stage(run, "train", 2.0, warm_start=warm)
    summary = RunSummary.build(run, tmp_path / "none", "", "ctr", "r4", status="FAILED")
    assert summary.stage_seconds["preprocess"] is None and summary.failed_stage == "preprocess"
    assert summary.stage_seconds["train"] == 2.0 and summary.warm_start == warm
    lines = summary.text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  model "))
    assert lines[at + 1] == "  warm     from ctr v3's weights"


def test_a_summary_no_reader_can_use_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "summary.json"
    for doc, why in (
        ({"status": "SUCCEEDED"}, "no 'run_id' field"),
        ({"run_id": "", "status": "SUCCEEDED"}, "run_id ''"),
        ({"run_id": "r1", "status": "COMPLETE"}, "status 'COMPLETE'"),
        ({"format": "dailyrec.run-summary/v9", "run_id": "r1", "status": "FAILED"}, "format is"),
    ):
        path.write_text(json.dumps(doc))
        with pytest.raises(RunSummaryError, match=re.escape(str(path)) + ".*" + re.escape(why)):
            RunSummary.read(path)
    assert RunSummary.find(path) is None
    # written before summaries carried a format: read as the first version
    path.write_text(json.dumps({"run_id": "r1", "status": "CANCELED", "error": "SIGTERM"}))
    assert RunSummary.read(path).error == "SIGTERM"


def test_a_run_folder_belongs_to_one_unfinished_kfp_run(tmp_path):
    from components.common.runs import OWNER, SUMMARY, RunFolderTaken, claim_run_dir

    folder = tmp_path / "runs" / "nightly"
    assert claim_run_dir(folder, "kfp-a") == folder
    assert json.loads((folder / OWNER).read_text())["kfp_run_id"] == "kfp-a"
    assert claim_run_dir(folder, "kfp-a") == folder  # a retried task of the same run
    with pytest.raises(
        RunFolderTaken,
        match=rf"^run folder {folder} is in use by KFP run kfp-a, which has not "
        r"finished: give this run another run_id .*delete .*owner\.json",
    ):
        claim_run_dir(folder, "kfp-b")
    assert json.loads((folder / OWNER).read_text())["kfp_run_id"] == "kfp-a"  # untouched
    (folder / SUMMARY).write_text(
        "{}"
    )  # kfp-a finished: a deliberate re-run of the same id may take it
    claim_run_dir(folder, "kfp-b")
    assert json.loads((folder / OWNER).read_text())["kfp_run_id"] == "kfp-b"
