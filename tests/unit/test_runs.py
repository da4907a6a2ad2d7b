"""The run folder's summary: built from whatever the stages left, failures included."""

from __future__ import annotations

import json

import pytest

from components.common.evaluation import Decision
from components.common.plan import TrainPlan, write_plan
from components.common.registration import Registration
from components.common.runs import build_summary, record_stage, summary_text
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
    summary = build_summary(run, data, str(raw), "ctr", "r1", status="FAILED", error="boom")
    assert summary["failed_stage"] == "train" and summary["run_date"] == "2026-01-05"
    assert summary["dataset_rows"] == {"train": 10, "val": 3, "test": 4}
    assert summary["oracle_auc"] == 0.8  # the test day only
    assert summary["stage_seconds"] == {
        "preprocess": 1.5,
        "estimate": 0.25,
        "train": None,
        "evaluate": None,
        "register": None,
    }
    assert summary["test_auc"] is None and summary["blessed"] is None
    text = summary_text(summary)
    assert "FAILED in stage train (boom)" in text and "debug on 2 process(es)" in text
    json.dumps(summary)  # machine-readable as is


def test_not_blessed_run_is_not_a_register_failure(tmp_path):
    run = tmp_path / "run"
    for stage in ("preprocess", "estimate", "train", "evaluate"):
        record_stage(run, stage, 1.0)
    Decision(blessed=False, reasons=("x",), rule={}, champion_version=3).write(run / "evaluate")
    summary = build_summary(run, tmp_path / "none", "", "ctr", "r2")
    assert summary["failed_stage"] is None and summary["champion_version"] == 3
    assert summary["model_version"] is None and summary["oracle_auc"] is None
    assert "NOT BLESSED" in summary_text(
        summary
    ) and "nothing registered; champion = v3" in summary_text(summary)
    assert summary["model_card"] is None and "card " not in summary_text(summary)


def test_the_summary_links_the_registered_versions_card(tmp_path):
    run = tmp_path / "run"
    for stage in ("preprocess", "estimate", "train", "evaluate", "register"):
        record_stage(run, stage, 1.0)
    card = "runs:/0123abcd/model_card/model_card.md"
    Registration("ctr", "k" * 64, True, registered=True, version=4, model_card=card).write(run)
    summary = build_summary(run, tmp_path / "none", "", "ctr", "r3")
    assert summary["model_card"] == card
    assert f"  card     {card}" in summary_text(summary).splitlines()


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
