"""A run's records as the exit handler reads them (summary.json, the evaluate stage's
decision.json), written by hand: for the monitoring tests, which push or draw them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from components.common.evaluation import Decision
from components.common.run_summary import RunSummary

SUMMARY_KEYS = {f.name for f in dataclasses.fields(RunSummary)} - {"source"} | {"format"}
"""The keys of every summary.json the exit handler writes."""


def summary(status="SUCCEEDED", test_auc=0.70, measured=9000.0, run_folder=None) -> RunSummary:
    return RunSummary(
        run_id="r1",
        status=status,
        model_name="dailyrec",
        test_auc=test_auc,
        blessed=status == "SUCCEEDED",
        champion_version=3,
        total_seconds=100.0,
        stage_seconds={
            "preprocess": 10.0,
            "estimate": 2.0,
            "train": 80.0,
            "evaluate": 5.0,
            "register": 3.0 if status == "SUCCEEDED" else None,
        },
        dataset_rows={"train": 1000, "val": 200, "test": 200},
        plan_vs_actual={"samples_per_s": {"measured": measured, "predicted": 10000.0}},
        run_folder=str(run_folder) if run_folder else "",
    )


def decision(folder: Path, champion_auc: float, tolerance: float = 0.002) -> Path:
    """A run folder whose evaluate compared with a champion of ``champion_auc``."""
    Decision(
        blessed=True,
        reasons=("forced",),
        rule={"tolerance": tolerance},
        comparison={"auc_a": 0.0, "auc_b": champion_auc},
    ).write(folder / "evaluate")
    return folder


def run_record(folder: Path, run_id: str = "r1", data_dir: str = "", **fields) -> Path:
    """``folder/run.json`` as the window task writes it (``fields`` override the rest)."""
    from components.common.run_record import RunRecord

    values = {
        "run_id": run_id,
        "raw_uri": "",
        "data_dir": data_dir,
        "end_date": "2026-01-01",
        "run_date": "",
        "schedule_time": "",
        "window_days": 11,
        "history_days": 3,
        "seq_len": 20,
        "input_fingerprint": "0" * 64,
        "files": 1,
        **fields,
    }
    return RunRecord(**values).write(folder)
