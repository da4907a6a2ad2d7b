"""The worlds the model is judged on, and how a benchmark trains on one as the pipeline does.

Shared by the quality, downsampling and gate benchmarks: synthetic logs of
``components.datagen`` (make run's sample and a denser one) and MovieLens-100K
(real public logs), each preprocessed into a dataset under ``SCRATCH``; a
training there runs the pipeline's own estimate, launcher and trainer.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from benchmarks import movielens, snapshot_time
from benchmarks.measure import run_measured
from benchmarks.readme import ROOT
from components.common.evaluation import Metrics
from components.common.schema import datagen_summary

CONFIG = ROOT / "configs" / "local.json"
SCRATCH = ROOT / "benchmarks" / "scratch" / "quality"


@dataclass(frozen=True)
class World(ABC):
    """Raw logs to judge on and the window trained on (the last ``test_days`` the test split,
    the ``val_days`` before them validation, ``history_days`` before the window read only for
    histories)."""

    name: str
    window_days: int
    history_days: int
    val_days: int = 1
    test_days: int = 1

    source: ClassVar[str]
    """Where the logs come from (the report's ``source``)."""

    @abstractmethod
    def write_raw(self, raw: Path) -> None:
        """Write the world's raw day folders into ``raw`` (kept when already there)."""

    def preprocess_flags(self) -> list[str]:
        return [
            "--days",
            str(self.window_days),
            "--history-days",
            str(self.history_days),
            "--val-days",
            str(self.val_days),
            "--test-days",
            str(self.test_days),
        ]


@dataclass(frozen=True)
class Synthetic(World):
    """Logs of ``components.datagen`` (its flags); the generator's truth is known."""

    source: ClassVar[str] = "synthetic"

    days: int = 14
    users: int = 20_000
    items: int = 50_000
    events_per_day: int = 100_000
    seed: int = 7

    def write_raw(self, raw: Path) -> None:
        if datagen_summary(raw).is_file():
            return
        flags = {
            "--days": self.days,
            "--users": self.users,
            "--items": self.items,
            "--events-per-day": self.events_per_day,
            "--seed": self.seed,
        }
        argv = [a for flag, value in flags.items() for a in (flag, str(value))]
        run_measured([sys.executable, "-m", "components.datagen", "--out", str(raw), *argv])


@dataclass(frozen=True)
class MovieLens(World):
    """Real public logs (``benchmarks.movielens``): a rating is an exposure, 4 or 5 stars a
    click. Their days hold few users each, so the splits span weeks; no truth is known."""

    source: ClassVar[str] = "MovieLens-100K"

    def write_raw(self, raw: Path) -> None:
        movielens.fetch(raw)


_LOCAL = json.loads(CONFIG.read_text())
# make run's sample and window (the Makefile's and configs/local.json's defaults); another seed
# with 3x the events per day (a shorter window keeps its training rows near the first world's);
# MovieLens-100K's 215 days: four weeks of test (239 users), four of validation, two weeks of
# look-back, the rest training.
WORLDS = (
    Synthetic("make-run", _LOCAL["window_days"], _LOCAL["history_days"]),
    Synthetic("seed-8-3x", 6, 2, days=8, events_per_day=300_000, seed=8),
    MovieLens("movielens-100k", 201, 14, val_days=28, test_days=28),
)
QUICK = Synthetic("quick", 6, 1, days=8, users=2_000, items=3_000, events_per_day=6_000, seed=5)


def train_dailyrec(
    data: Path,
    work: Path,
    epochs: int,
    negative_keep: float | None = None,
    serve: bool = True,
    negatives_per_positive: float | None = None,
    seed: int = 0,
    snapshot_times: bool = False,
) -> tuple[np.ndarray, dict]:
    """The pipeline's plan (``negative_keep``, ``negatives_per_positive``: the estimate's defaults
    unless given; ``seed``: the plan's, of initialization, shuffling and the negatives' draw),
    launcher and trainer; the best checkpoint scores the test split (also as served, with
    ``serve``; and at each snapshot time resolution, with ``snapshot_times``)."""
    from components.common.dataset_meta import DatasetMeta
    from components.common.train_summary import TrainSummary
    from components.train.inference import load_scorer, predict_logits, sigmoid, split_rows

    flags = ["--max-epochs", str(epochs)]
    flags += ["--negative-keep", str(negative_keep)] if negative_keep is not None else []
    if negatives_per_positive is not None:
        flags += ["--negatives-per-positive", str(negatives_per_positive)]
    started = time.perf_counter()
    out = plan_and_train(data, work, flags, {"seed": seed} if seed else {})
    seconds = time.perf_counter() - started
    summary = TrainSummary.read(out)
    scorer = load_scorer(out / "best.pt")
    meta = DatasetMeta.read(data)
    logits = predict_logits(scorer.model, split_rows(data, "test", meta, 8192))
    return sigmoid(logits), {
        "train_seconds": round(seconds, 1),
        "epochs_run": summary.epochs_run,
        "best_epoch": summary.best_epoch,
        "best_val_auc": summary.best_val_auc,
        "rows_trained": summary.rows_trained,
        "negative_keep": summary.negative_keep,
        **({"served": served(data, out / "best.pt", work / "evaluate")} if serve else {}),
        **(
            {"snapshot_time": snapshot_time.by_resolution(data, out / "best.pt")}
            if snapshot_times
            else {}
        ),
    }


def plan_and_train(data: Path, work: Path, flags: list[str], changes: dict) -> Path:
    """The estimate's plan for ``data`` (the shipped config's model, hardware and global batch,
    then ``flags`` of ``python -m components.estimate``), with the plan fields in ``changes``
    replaced (checked by TrainPlan), trained by the pipeline's launcher; its output folder."""
    from components.common.plan import read_plan, write_plan

    config = json.loads(CONFIG.read_text())
    work.mkdir(parents=True, exist_ok=True)
    plan = work / "plan.json"
    run_measured(
        [sys.executable, "-m", "components.estimate", "--data", str(data), "--out", str(plan)]
        + ["--model", config["model_config"], "--hardware", config["hardware_profile"]]
        + ["--global-batch", str(config["global_batch"]), *flags]
    )
    if changes:
        planned, doc = read_plan(plan)
        write_plan(plan, replace(planned, **changes), doc["rationale"], doc["estimate"])
    out = work / "train"
    shutil.rmtree(out, ignore_errors=True)
    # restarts resume from the last checkpoint, as the pipeline's own launch does after a crash
    run_measured(
        [sys.executable, "-m", "components.train.launch", "--data", str(data)]
        + ["--plan", str(plan), "--out", str(out), "--max-restarts", "2"]
    )
    return out


def served(data: Path, checkpoint: Path, out: Path) -> dict:
    """The evaluate stage on the checkpoint (no registry): its test AUC as served -- each test
    row built by serving's own code from the state at the start of its day -- and the
    train-serve skew (dataset features minus served, users as the unit)."""
    # no registry: the candidate is judged alone, whatever the caller's environment names
    run_measured(
        [
            sys.executable,
            "-m",
            "components.evaluate",
            "--data",
            str(data),
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(out),
        ],
        env={"MLFLOW_TRACKING_URI": ""},
    )
    metrics = Metrics.read(out).served
    skew = metrics["skew"]
    return {
        "auc": metrics["auc"],
        "snapshot_only_auc": metrics["snapshot_only_auc"]["auc"],
        "skew": {k: skew[k] for k in ("delta", "ci_low", "ci_high", "users")},
    }


def prepare(world: World, root: Path) -> tuple[Path, Path]:
    raw, data = root / world.name / "raw", root / world.name / "dataset"
    world.write_raw(raw)
    run_measured(
        [
            sys.executable,
            "-m",
            "components.preprocess",
            "--raw",
            str(raw),
            "--out",
            str(data),
            *world.preprocess_flags(),
        ]
    )
    return raw, data
