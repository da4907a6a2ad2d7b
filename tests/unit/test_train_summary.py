"""train_summary.json: one typed document, written and read by TrainSummary only."""

from __future__ import annotations

import json

from components.common.train_summary import (
    SUMMARY_FORMAT,
    TRAIN_SUMMARY,
    TrainSummary,
)


def summary(**changes) -> TrainSummary:
    values = {
        "epochs_run": 3,
        "best_val_auc": 0.7312,
        "rows_trained": 1200,
        "seconds": 41.7,
        "world_size": 2,
        "best_epoch": 1,
        "early_stopped": True,
        "samples_per_s": 2664.2,
        "data_wait_fraction": 0.031,
        "history": ({"epoch": 0, "val_auc": 0.70}, {"epoch": 1, "val_auc": 0.7312}),
        "flags": ({"flag": "input-bound", "value": 0.3, "recommendation": "more workers"},),
        "plan": {"micro_batch": 512, "negative_keep": 0.26},
        "plan_vs_actual": {"drift": [], "seconds": {"planned": 40.0, "measured": 41.7}},
        "warm_start": {"from": "models:/dailyrec@champion", "applied": True, "reason": None},
        "mlflow_run_id": "abc",
    }
    return TrainSummary(**{**values, **changes})


def test_a_written_summary_reads_back_equal(tmp_path):
    written = summary()
    path = written.write(tmp_path)
    assert path == tmp_path / TRAIN_SUMMARY
    doc = json.loads(path.read_text())
    assert doc["format"] == SUMMARY_FORMAT and doc["history"][1]["val_auc"] == 0.7312
    read = TrainSummary.read(tmp_path)
    assert read == written and read.source == path
    assert TrainSummary.read(path) == written  # the folder or the file itself


def test_the_summary_beside_a_checkpoint_or_none(tmp_path):
    summary().write(tmp_path)
    assert TrainSummary.beside(tmp_path / "best.pt").mlflow_run_id == "abc"
    assert TrainSummary.beside(tmp_path / "copied" / "best.pt") is None


def test_one_line_for_a_person():
    assert summary().line() == (
        "best val AUC 0.7312 at epoch 2 of 3 (early stop); 2664 samples/s on 2 x cpu, "
        "data-wait 3.1%, 42s"
    )
    assert (
        summary(best_val_auc=None, best_epoch=None, early_stopped=False)
        .line()
        .startswith("no epoch of 3; ")
    )
