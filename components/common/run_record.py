"""The run record, ``runs/<run id>/run.json``: what a daily run resolved before any stage ran.

The window task writes it once (:meth:`RunRecord.write`, see
:class:`components.common.document.Document`); finalize reads it to build the summary
and retention reads it to find the dataset a run used (:meth:`RunRecord.read`). Its format is in
docs/data.md (Run record). A record written before the document carried a ``format`` reads as
the first version, which has the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from components.common.document import Document, DocumentError

RUN_RECORD = "run.json"
"""The run record's file name in a run folder."""
RUN_RECORD_FORMAT = "dailyrec.run-record/v1"
"""The format this code writes and reads."""


class RunRecordError(DocumentError):
    """A run record that cannot be read (one line naming the file and what is wrong)."""


@dataclass(frozen=True)
class RunRecord(Document):
    """One run's resolved inputs."""

    FILE: ClassVar[str] = RUN_RECORD
    FORMAT: ClassVar[str] = RUN_RECORD_FORMAT
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "run_id",
        "raw_uri",
        "data_dir",
        "end_date",
        "run_date",
        "schedule_time",
        "window_days",
        "history_days",
        "seq_len",
        "input_fingerprint",
        "files",
    )
    WHAT: ClassVar[str] = "run record"
    ABSENT: ClassVar[str] = "the window was never resolved"
    REWRITE: ClassVar[str] = "start the run again"
    Error: ClassVar[type[DocumentError]] = RunRecordError
    UNVERSIONED_IS_FIRST: ClassVar[bool] = True

    run_id: str
    """The run's folder name under ``runs/``."""
    raw_uri: str
    """The raw event logs read."""
    data_dir: str
    """The dataset folder of the run's cache key (``datasets/<end date>-<digest>``)."""
    end_date: str
    """The window's last day, YYYY-MM-DD."""
    run_date: str
    """The ``run_date`` parameter as given ("" when the window came from the schedule time or the
    latest day present)."""
    schedule_time: str
    """The run's schedule time as KFP gave it (RFC 3339, or "" / unresolved)."""
    window_days: int
    """Days in the window."""
    history_days: int
    """Extra days read only for histories and counts."""
    seq_len: int
    """Behaviour history length."""
    input_fingerprint: str
    """The preprocess cache key (files, window, config, code)."""
    files: int
    """Raw files in the window."""
