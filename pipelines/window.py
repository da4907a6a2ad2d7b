"""What the resolve-window task does inside its run folder: the window's days and files resolved,
the dataset folder named by their fingerprint, the run record written."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Window(NamedTuple):
    """The resolve-window task's outputs (the KFP component returns them in this order)."""

    raw_uri: str
    data_dir: str
    run_dir: str
    run_id: str
    end_date: str
    input_fingerprint: str


def resolve_run_window(
    folder: Path,
    rid: str,
    *,
    raw_uri: str,
    storage_root: str,
    run_date: str,
    schedule_time: str,
    window_days: int,
    history_days: int,
    seq_len: int,
) -> Window:
    """Resolve the window of run ``rid`` (its claimed ``folder``) and write its run record there.

    Reads no rows: lists the files and what the filesystem vouches for about each.
    """
    from components.common.paths import inside
    from components.common.run_record import RunRecord
    from components.common.runs import dataset_dir
    from components.preprocess.config import PreprocessConfig
    from components.preprocess.logical_date import logical_end_date
    from components.preprocess.stage import resolve_inputs

    raw = raw_uri or f"{storage_root.rstrip('/')}/raw"
    end = logical_end_date(run_date, schedule_time)
    config = PreprocessConfig(
        raw=raw,
        out=storage_root,
        end_date=end,
        days=window_days,
        history_days=history_days,
        seq_len=seq_len,
    )
    found = resolve_inputs(config)
    end_date = found.window.end.isoformat()
    data = inside(
        storage_root, dataset_dir(storage_root, end_date, found.fingerprint), "dataset folder"
    )
    RunRecord(
        run_id=rid,
        raw_uri=raw,
        data_dir=str(data),
        end_date=end_date,
        run_date=run_date,
        schedule_time=schedule_time,
        window_days=window_days,
        history_days=history_days,
        seq_len=seq_len,
        input_fingerprint=found.fingerprint,
        files=len(found.files),
    ).write(folder)
    how = "run_date" if run_date else "schedule time" if end else "latest day present"
    print(
        f"run {rid}: window ending {end_date} ({how}; {len(found.files)} raw files), dataset {data}"
    )
    return Window(raw, str(data), str(folder), rid, end_date, found.fingerprint)


def check_unchanged(fingerprint: str, input_fingerprint: str, data_dir: str) -> None:
    """Refuse a dataset built from other files than the window resolved: the raw files changed
    between the resolve-window and preprocess tasks."""
    if fingerprint != input_fingerprint:
        raise RuntimeError(
            f"{data_dir}: fingerprint {str(fingerprint)[:12]} differs from the resolved "
            f"{input_fingerprint[:12]}: the raw files changed during the run"
        )
