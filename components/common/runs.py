"""The run folder: where one pipeline run keeps its small outputs, and its summary.

Layout under a storage root (a local folder or a mounted volume)::

    datasets/<end date>-<key>/     preprocess output (shared by runs with the same cache key)
    runs/<run id>/plan.json        estimate
    runs/<run id>/train/           checkpoints, train_summary.json
    runs/<run id>/evaluate/        metrics.json, decision.json, report.md, plots
    runs/<run id>/registration.json
    runs/<run id>/stages/<stage>.json   wall-clock seconds of each stage
    runs/<run id>/summary.json     the run's summary (written by the pipeline's exit handler)
    runs/<run id>/owner.json       the KFP run that uses the folder (:func:`claim_run_dir`)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.common import schema
from components.common.dataset import SPLITS, DatasetError, folder_name
from components.common.dataset_meta import DatasetMeta
from components.common.evaluation import TEST_METRICS, Decision, Metrics
from components.common.plan import BRIEF, TrainPlan, drift_lines, read_plan
from components.common.registration import REGISTRATION, Registration
from components.common.storage import atomic_write_bytes, atomic_write_json
from components.common.train_summary import TrainSummary

STAGES = ("preprocess", "estimate", "train", "evaluate", "register")
SUMMARY = "summary.json"
# what each stage writes, by name: the stages write them (into their --out folders), the run
# folder below finds them
PLAN = "plan.json"
OWNER = "owner.json"


@dataclass(frozen=True)
class RunFolder:
    """One run's folder (``runs/<run id>``) and where each stage's files lie in it."""

    path: Path

    @classmethod
    def of(cls, storage_root: str | Path, run_id: str) -> RunFolder:
        return cls(run_dir(storage_root, run_id))

    @property
    def plan(self) -> Path:
        return self.path / PLAN

    @property
    def train(self) -> Path:
        """The trainer's ``--out``: checkpoints and :data:`~components.common.train_summary.TRAIN_SUMMARY`."""
        return self.path / "train"

    @property
    def evaluate(self) -> Path:
        """Evaluate's ``--out``: the metrics and the decision (:mod:`components.common.evaluation`),
        the report and plots."""
        return self.path / "evaluate"

    @property
    def registration(self) -> Path:
        return self.path / REGISTRATION

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def owner(self) -> Path:
        return self.path / OWNER

    def stage_record(self, stage: str) -> Path:
        return self.path / "stages" / f"{stage}.json"

    def outputs(self) -> tuple[Path, ...]:
        """What the stages write into the folder (the exit handler clears their stale temp files)."""
        return self.train, self.evaluate, self.registration, self.summary


def dataset_dir(storage_root: str | Path, end_date: str, fingerprint: str) -> Path:
    """``datasets/<end date>-<digest of the preprocess cache key>`` (see ``dataset.folder_name``)."""
    return Path(storage_root) / "datasets" / folder_name(end_date, fingerprint)


LATEST = "latest"


def latest_dataset(storage_root: str | Path) -> Path:
    """``datasets/latest``: a link to the newest window's dataset, for consumers that are not part of a
    run (the Katib experiment ``make deploy`` creates), so they follow the daily window."""
    return Path(storage_root) / "datasets" / LATEST


def point_latest(data_dir: str | Path) -> bool:
    """Point ``datasets/latest`` at ``data_dir`` (atomically: a new link renamed over the old) unless it
    already points at a later window (a backfill never moves it back); True when it moved."""
    data_dir = Path(data_dir)
    link = data_dir.parent / LATEST
    try:
        current = os.readlink(link)
    except OSError:
        current = None
    if current is not None and current[:10] > data_dir.name[:10]:  # names start with the end date
        return False
    tmp = link.with_name(f".{LATEST}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(data_dir.name, tmp)  # relative: valid wherever the volume is mounted
    os.replace(tmp, link)
    return True


def run_dir(storage_root: str | Path, run_id: str) -> Path:
    return Path(storage_root) / "runs" / run_id


class RunFolderTaken(RuntimeError):
    """Another KFP run, still unfinished, uses this run folder (the same explicit run_id twice)."""


def claim_run_dir(folder: str | Path, kfp_run_id: str) -> Path:
    """Make ``folder`` this KFP run's: two runs started with the same explicit ``run_id`` would
    otherwise write their plans, checkpoints and summaries into one folder.

    Taken when free (created exclusively), already ours (a retried task), or left by a run that
    finished (its summary is written: a deliberate re-run of the same id). Otherwise
    :class:`RunFolderTaken` names the other run. Local runs hold the storage root's lock for
    their whole length, so ``pipelines.local`` clears the claim of a killed earlier run first.
    """
    run = RunFolder(Path(folder))
    run.path.mkdir(parents=True, exist_ok=True)
    path = run.owner
    record = json.dumps({"kfp_run_id": kfp_run_id, "claimed_at": time.time()}).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        owner = (_read(path) or {}).get("kfp_run_id")
        if owner == kfp_run_id:
            return run.path
        if owner is not None and not run.summary.is_file():
            raise RunFolderTaken(
                f"run folder {run.path} is in use by KFP run {owner}, which has not finished: give this run "
                f"another run_id (or leave it empty for the KFP run id); if that run is gone (cancelled), "
                f"delete {path}"
            ) from None
        atomic_write_bytes(
            path, record
        )  # a finished run's folder (or an unreadable claim): ours now
        return run.path
    with os.fdopen(fd, "wb") as f:
        f.write(record)
    return run.path


def claimed_by_other(folder: str | Path, kfp_run_id: str) -> str | None:
    """The other KFP run that claimed ``folder``; None when unclaimed or ours."""
    owner = (_read(RunFolder(Path(folder)).owner) or {}).get("kfp_run_id")
    return owner if owner not in (None, kfp_run_id) else None


def record_stage(folder: str | Path, stage: str, seconds: float, **info: Any) -> None:
    """Note a stage's wall-clock seconds (and anything else worth a line) in the run folder, and say so."""
    print(f"[dailyrec] stage {stage} done in {seconds:.1f}s", flush=True)
    atomic_write_json(
        RunFolder(Path(folder)).stage_record(stage),
        {"stage": stage, "seconds": round(seconds, 3), "finished": time.time(), **info},
    )


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _number(value: Any) -> float | None:
    return None if not isinstance(value, int | float) or math.isnan(value) else float(value)


def build_summary(
    folder: str | Path,
    data_dir: str | Path,
    raw_uri: str,
    model_name: str,
    run_id: str,
    status: str = "SUCCEEDED",
    error: str | None = None,
) -> dict:
    """The run's summary from what its stages left in ``folder``; stages that did not run are null."""
    run = RunFolder(Path(folder))
    meta = _dataset_meta(data_dir)
    plan = _train_plan(run.plan)
    train = TrainSummary.find(run.train)
    metrics = Metrics.find(run.evaluate)
    decision = Decision.find(run.evaluate)
    registration = Registration.find(run.registration)
    stages = {}
    for stage in STAGES:
        record = _read(run.stage_record(stage))
        stages[stage] = record["seconds"] if record else None
    window = dataclasses.asdict(meta.window) if meta and meta.window else {}
    if registration:
        champion = registration.champion_version
    else:
        champion = decision.champion_version if decision else None
    failed_stage = (
        next((s for s in STAGES if stages[s] is None), None) if status != "SUCCEEDED" else None
    )
    if failed_stage == "register" and decision and not decision.blessed:
        failed_stage = None  # not blessed: register was skipped, the run failed after evaluate
    return {
        "run_id": run_id,
        "status": status,
        "error": error,
        "failed_stage": failed_stage,
        "run_date": window.get("end"),
        "window": window,
        "dataset": str(data_dir),
        "dataset_fingerprint": meta.fingerprint if meta else None,
        "dataset_rows": {
            s: meta.splits[s].rows if meta and s in meta.splits else None for s in SPLITS
        },
        "best_val_auc": _number(train.best_val_auc) if train else None,
        "epochs_run": train.epochs_run if train else None,
        **{k: _number(getattr(metrics, k, None)) for k in TEST_METRICS},
        "served_auc": _number(metrics.served.get("auc")) if metrics else None,
        "oracle_auc": oracle_auc(raw_uri, window.get("test_days")),
        "blessed": decision.blessed if decision else None,
        "decision_reasons": list(decision.reasons) if decision else None,
        "model_name": model_name,
        "model_version": registration.version if registration else None,
        "champion_version": champion,
        "previous_version": registration.previous_version if registration else None,
        "model_card": registration.model_card if registration else None,
        "stage_seconds": stages,
        "total_seconds": round(sum(v for v in stages.values() if v), 3),
        "plan": plan.brief() if plan else dict.fromkeys(BRIEF),
        "plan_vs_actual": train.plan_vs_actual if train else None,
        "run_folder": str(run.path),
    }


def _train_plan(path: Path) -> TrainPlan | None:
    """The run's plan, or None where estimate left none (or one no stage could read)."""
    try:
        return read_plan(path)[0]
    except ValueError:
        return None


def _dataset_meta(data_dir: str | Path) -> DatasetMeta | None:
    """The dataset's meta.json, or None where preprocess left none (or one no stage could read)."""
    try:
        return DatasetMeta.read(data_dir, splits=()) if str(data_dir) else None
    except DatasetError:
        return None


def oracle_auc(raw_uri: str, test_days: str | None) -> float | None:
    """Mean Bayes-optimal AUC of the test days when the raw data is generated (its description,
    :func:`components.common.schema.datagen_summary`, says)."""
    doc = _read(schema.datagen_summary(raw_uri)) if raw_uri and "://" not in raw_uri else None
    if not doc or not test_days:
        return None
    first, _, last = test_days.partition(" .. ")
    values = [v for day, v in doc.get("oracle_auc", {}).items() if first <= day <= (last or first)]
    return round(sum(values) / len(values), 4) if values else None


def write_summary(folder: str | Path, summary: dict) -> Path:
    return atomic_write_json(RunFolder(Path(folder)).summary, summary)


def summary_text(summary: dict) -> str:
    """The readable end of a run."""

    def f(value, fmt=".4f"):
        return "—" if value is None else format(value, fmt)

    rows = summary["dataset_rows"]
    verdict = {True: "BLESSED", False: "NOT BLESSED"}.get(summary["blessed"], "not evaluated")
    lines = [
        f"run {summary['run_id']}: {summary['status']}"
        + (f" in stage {summary['failed_stage']}" if summary.get("failed_stage") else "")
        + (f" ({summary['error']})" if summary["error"] else ""),
        f"  data     {summary['run_date']}  train {f(rows['train'], ',')} / val {f(rows['val'], ',')} / "
        f"test {f(rows['test'], ',')} rows",
        f"  plan     {summary['plan'].get('model')} on {summary['plan'].get('nproc_per_node')} process(es), "
        f"micro-batch {summary['plan'].get('micro_batch')} x accum {summary['plan'].get('grad_accum')}, "
        f"{summary['plan'].get('precision')}",
        f"  model    best val AUC {f(summary['best_val_auc'])} after {summary['epochs_run']} epoch(s); "
        f"test AUC {f(summary['test_auc'])}  GAUC {f(summary['test_gauc'])}"
        + (f"  served AUC {f(summary['served_auc'])}" if summary.get("served_auc") else "")
        + (f"  (oracle {f(summary['oracle_auc'])})" if summary["oracle_auc"] else ""),
        f"  decision {verdict}"
        + "".join(f"\n           - {r}" for r in summary["decision_reasons"] or []),
        f"  registry {summary['model_name']}: "
        + (
            f"version {summary['model_version']} registered; "
            if summary["model_version"]
            else "nothing registered; "
        )
        + (
            f"champion = v{summary['champion_version']}"
            if summary["champion_version"]
            else "no champion"
        )
        + (
            f", previous = v{summary['previous_version']}"
            if summary.get("previous_version")
            else ""
        ),
        *([f"  card     {summary['model_card']}"] if summary.get("model_card") else []),
        "  seconds  "
        + ", ".join(f"{k} {f(summary['stage_seconds'].get(k), '.1f')}" for k in STAGES),
    ]
    lines += [f"  estimate {line}" for line in drift_lines(summary.get("plan_vs_actual"))]
    return "\n".join(lines)
