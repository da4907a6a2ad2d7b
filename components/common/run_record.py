"""The run record, ``runs/<run id>/run.json``: what a daily run resolved before any stage ran.

The window task writes it once (:meth:`RunRecord.write`); finalize reads it to build the summary
and retention reads it to find the dataset a run used (:meth:`RunRecord.read`). Its format is in
docs/data.md (Run record). A record written before the document carried a ``format`` reads as
the first version, which has the same fields.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.common.storage import atomic_write_json

RUN_RECORD = "run.json"
"""The run record's file name in a run folder."""
RUN_RECORD_FORMAT = "dailyrec.run-record/v1"
"""The format this code writes and reads."""


class RunRecordError(ValueError):
    """A run record that cannot be read (one line naming the file and what is wrong)."""


@dataclass(frozen=True)
class RunRecord:
    """One run's resolved inputs."""

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

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            expected = int if f.type == "int" else str
            if not isinstance(value, expected) or isinstance(value, bool):
                raise RunRecordError(
                    f"run record field {f.name}: expected {expected.__name__}, got {value!r}"
                )

    def write(self, folder: str | Path) -> Path:
        """Write ``folder/run.json`` atomically."""
        return atomic_write_json(
            Path(folder) / RUN_RECORD, {"format": RUN_RECORD_FORMAT, **dataclasses.asdict(self)}
        )

    @classmethod
    def from_document(cls, doc: Any, source: str = RUN_RECORD) -> RunRecord:
        """The record of a parsed ``run.json``; a RunRecordError names ``source`` and the fault."""
        if not isinstance(doc, dict):
            raise RunRecordError(f"{source}: not a JSON object")
        found = doc.get("format", RUN_RECORD_FORMAT)
        if found != RUN_RECORD_FORMAT:
            raise RunRecordError(
                f"{source}: format {found!r}, this code reads {RUN_RECORD_FORMAT!r}"
            )
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in doc]
        if missing:
            raise RunRecordError(f"{source}: no field {missing[0]!r}")
        try:
            return cls(**{n: doc[n] for n in names})
        except RunRecordError as exc:
            raise RunRecordError(f"{source}: {exc}") from None

    @classmethod
    def read(cls, folder: str | Path) -> RunRecord:
        """The record in ``folder``; a RunRecordError when it is absent or unreadable."""
        path = Path(folder) / RUN_RECORD
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise RunRecordError(f"{path}: no run record (the window was never resolved)") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise RunRecordError(f"{path}: unreadable ({exc})") from None
        return cls.from_document(doc, str(path))

    @classmethod
    def find(cls, folder: str | Path) -> RunRecord | None:
        """The record in ``folder``, or None when there is none or it cannot be read."""
        try:
            return cls.read(folder)
        except RunRecordError:
            return None
