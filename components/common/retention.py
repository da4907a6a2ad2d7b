"""Retention of a storage root: a daily schedule must not fill its volume.

Every run adds a run folder (``runs/<id>/``: plan, checkpoints, reports) and most add a dataset
(``datasets/<end date>-<key>/``, one per window). :func:`apply_retention` removes those a
policy no longer keeps, and never one that is needed:

* the run folders of the last ``keep_days`` days (by when they finished) and the datasets they
  point at are kept;
* so are the *protected* runs -- the lineage of the registry's ``@champion`` and ``@previous``
  (their run folders and datasets), named by the caller from the registry -- whatever their age;
* a run that has not finished (no ``summary.json``) is live unless its claim is older than
  :data:`LIVE_S`; a live run's folder and dataset are never touched, nor ``datasets/latest``;
* only folders that look like what the pipeline writes are candidates (a run folder holds
  ``run.json`` or ``owner.json``; a dataset folder ``meta.json``); ``runs/mlflow.db``, MLflow's
  local ``artifacts/``, the lock and anything else under the root are never considered.

The caller holds the storage root's lock (no other run's stage writes meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from components.common.records import claimed_at
from components.common.run_record import RUN_RECORD, RunRecord
from components.common.runs import LATEST
from components.common.storage import TMP_MARKER

DAY_S = 86400.0
DEFAULT_KEEP_DAYS = 14
"""Days of run folders and datasets a storage root keeps (the pipeline's ``retention_days``)."""
LIVE_S = 3 * DAY_S
"""An unfinished run claimed more recently than this may still be running: it is never removed."""


@dataclass
class RetentionReport:
    """What one pass removed and kept, for the run's summary."""

    keep_days: int
    removed_runs: list[str] = field(default_factory=list)
    removed_datasets: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    kept_runs: int = 0
    kept_datasets: int = 0
    protected: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def state_dict(self) -> dict:
        return {
            "keep_days": self.keep_days,
            "removed_runs": self.removed_runs,
            "removed_datasets": self.removed_datasets,
            "freed_bytes": self.freed_bytes,
            "kept_runs": self.kept_runs,
            "kept_datasets": self.kept_datasets,
            "protected": self.protected,
            "errors": self.errors,
        }

    def line(self) -> str:
        if not self.keep_days:
            return "retention off (retention_days=0): nothing removed"
        return (
            f"retention {self.keep_days} day(s): removed {len(self.removed_runs)} run folder(s) and "
            f"{len(self.removed_datasets)} dataset(s), {self.freed_bytes / 2**20:,.1f} MiB freed; "
            f"kept {self.kept_runs} run(s), {self.kept_datasets} dataset(s)"
            + (f"; {len(self.errors)} error(s): {self.errors[0]}" if self.errors else "")
        )


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (links not followed)."""
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                continue
    return total


def _written(parent: Path, *markers: str) -> list[Path]:
    """Folders under ``parent`` holding one of ``markers`` (not links, not temps)."""
    if not parent.is_dir():
        return []
    return sorted(
        p
        for p in parent.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and TMP_MARKER not in p.name
        and any((p / marker).is_file() for marker in markers)
    )


def run_folders(root: Path) -> list[Path]:
    """Folders under ``runs/`` the pipeline wrote (``run.json`` or ``owner.json`` inside)."""
    return _written(root / "runs", RUN_RECORD, "owner.json")


def dataset_folders(root: Path) -> list[Path]:
    """Folders under ``datasets/`` holding a finished dataset (``meta.json``)."""
    return _written(root / "datasets", "meta.json")


def finished_at(folder: Path) -> float | None:
    """When a run finished (its summary's modification time); None while it has none."""
    try:
        return (folder / "summary.json").stat().st_mtime
    except OSError:
        return None


def _dataset_of(folder: Path, root: Path) -> Path | None:
    record = RunRecord.find(folder)
    if record is None or not record.data_dir:
        return None
    path = Path(record.data_dir)
    # a dataset named by another mount of the same volume: the same folder name under this root
    return root / "datasets" / path.name


def apply_retention(
    root: str | Path,
    keep_days: int = DEFAULT_KEEP_DAYS,
    protected_runs: set[str] | frozenset[str] = frozenset(),
    current_run: str | None = None,
    now: float | None = None,
) -> RetentionReport:
    """Remove the run folders and datasets the policy does not keep; see the module's rules.

    ``protected_runs``: run ids (folder names under ``runs/``) kept whatever their age, with their
    datasets: the registry's champion and previous versions. ``current_run``: the run applying
    the policy (always kept). ``keep_days=0`` turns retention off.
    """
    root = Path(root)
    report = RetentionReport(keep_days=keep_days)
    if keep_days <= 0:
        return report
    now = time.time() if now is None else now
    horizon = now - keep_days * DAY_S
    keep_datasets: set[str] = set()
    latest = root / "datasets" / LATEST
    with contextlib.suppress(OSError):
        keep_datasets.add(Path(os.readlink(latest)).name)
    doomed_runs = []
    for folder in run_folders(root):
        ended, claimed = finished_at(folder), claimed_at(folder)
        live = ended is None and claimed > now - LIVE_S
        if folder.name == current_run or folder.name in protected_runs:
            keep = True
            if folder.name in protected_runs:
                report.protected.append(folder.name)
        else:
            keep = live or (ended is not None and ended >= horizon)
            if ended is None and not live:  # dead and unfinished: judged by its claim's age
                keep = claimed >= horizon
        if keep:
            report.kept_runs += 1
            dataset = _dataset_of(folder, root)
            if dataset is not None:
                keep_datasets.add(dataset.name)
        else:
            doomed_runs.append(folder)
    for folder in doomed_runs:
        _remove(folder, report, report.removed_runs)
    for folder in dataset_folders(root):
        if folder.name in keep_datasets:
            report.kept_datasets += 1
            continue
        try:
            written = (folder / "meta.json").stat().st_mtime
        except OSError:
            continue
        if written >= horizon:
            report.kept_datasets += 1
            continue
        _remove(folder, report, report.removed_datasets)
    report.protected.sort()
    return report


def _remove(folder: Path, report: RetentionReport, into: list[str]) -> None:
    size = tree_bytes(folder)
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        report.errors.append(f"{folder}: {type(exc).__name__}: {exc}")
        return
    report.freed_bytes += size
    into.append(folder.name)
