"""The run folder: where one pipeline run keeps its small outputs.

Layout under a storage root (a local folder or a mounted volume)::

    datasets/<end date>-<key>/     preprocess output (shared by runs with the same cache key)
    runs/<run id>/plan.json        estimate
    runs/<run id>/train/           checkpoints, train_summary.json
    runs/<run id>/evaluate/        metrics.json, decision.json, report.md, plots
    runs/<run id>/registration.json
    runs/<run id>/stages/<stage>.json   wall-clock seconds of each stage
    runs/<run id>/summary.json     the run's summary (the exit handler: :mod:`components.common.run_summary`)
    runs/<run id>/owner.json       the KFP run that uses the folder (:func:`claim_run_dir`)
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.common.dataset import folder_name
from components.common.records import read_record
from components.common.registration import REGISTRATION
from components.common.storage import atomic_write_bytes, atomic_write_json

STAGES = ("preprocess", "estimate", "train", "evaluate", "register")
SUMMARY = "summary.json"
# what each stage writes, by name: the stages write them (into their --out folders), the run
# folder below finds them
PLAN = "plan.json"
OWNER = "owner.json"
DRIVER = "driver.json"
"""The process that drives a local run (``make run``): pid, host and start time."""


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

    @property
    def driver(self) -> Path:
        return self.path / DRIVER

    def stage_record(self, stage: str) -> Path:
        return self.path / "stages" / f"{stage}.json"

    def outputs(self) -> tuple[Path, ...]:
        """What the stages write into the folder (the exit handler clears their stale temp files)."""
        return self.train, self.evaluate, self.registration, self.summary


def dataset_dir(storage_root: str | Path, end_date: str, fingerprint: str) -> Path:
    """``datasets/<end date>-<digest of the preprocess cache key>`` (see ``dataset.folder_name``)."""
    return Path(storage_root) / "datasets" / folder_name(end_date, fingerprint)


LATEST = "latest"
MONITOR, DASHBOARD, SCREENSHOTS = "monitor", "dashboard", "screenshots"
"""Folders under ``runs/`` of make monitor (Prometheus' state), make dashboard and make
screenshots: no run may take their names."""


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
        owner = read_record(path).get("kfp_run_id")
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
    owner = read_record(RunFolder(Path(folder)).owner).get("kfp_run_id")
    return owner if owner not in (None, kfp_run_id) else None


def record_stage(folder: str | Path, stage: str, seconds: float, **info: Any) -> None:
    """Note a stage's wall-clock seconds (and anything else worth a line) in the run folder, and say so."""
    print(f"[dailyrec] stage {stage} done in {seconds:.1f}s", flush=True)
    atomic_write_json(
        RunFolder(Path(folder)).stage_record(stage),
        {"stage": stage, "seconds": round(seconds, 3), "finished": time.time(), **info},
    )


def record_driver(folder: str | Path) -> None:
    """Note in the run folder which process drives the run (this one), so another run declares it
    dead only once that very process is gone (:func:`driver_alive`)."""
    import psutil

    me = psutil.Process()
    atomic_write_json(
        RunFolder(Path(folder)).driver,
        {"pid": me.pid, "host": socket.gethostname(), "started": me.create_time()},
    )


GONE, RUNNING, ELSEWHERE = "gone", "running", "elsewhere"


def driver_state(folder: str | Path) -> str:
    """What became of the process recorded as driving the run in ``folder``: ``running`` (the
    same pid, started at the same time, on this host), ``gone`` (it ended, or the run recorded
    no driver: killed before it could), or ``elsewhere`` (driven from another host, which cannot
    be looked at from here: never declared dead on a guess)."""
    import psutil

    record = read_record(RunFolder(Path(folder)).driver)
    pid, started = record.get("pid"), record.get("started")
    if not record:
        return GONE
    if record.get("host") != socket.gethostname():
        return ELSEWHERE
    try:
        same = abs(psutil.Process(pid).create_time() - float(started)) < 1.0
    except (psutil.Error, TypeError, ValueError):
        return GONE
    return RUNNING if same else GONE
