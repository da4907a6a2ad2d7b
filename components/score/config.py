"""What batch scoring scores: :class:`ScoreConfig`, checked where it is built."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from components.common.registry_read import CHAMPION_URI

SCHEDULERS = ("threads", "sync")


@dataclass(frozen=True)
class ScoreConfig:
    """Which day to score, with which model, into which file."""

    raw: str
    """Raw events root (local path or fsspec URI) holding `dt=YYYY-MM-DD/` folders."""
    date: dt.date
    """The day folder to score, YYYY-MM-DD."""
    out: str
    """Parquet file to write (replaced atomically)."""
    model: str = CHAMPION_URI
    """Registered model: models:/NAME@ALIAS or models:/NAME/VERSION."""
    tracking_uri: str | None = None
    """MLflow registry (default: $MLFLOW_TRACKING_URI, else sqlite under ./runs)."""
    max_skew_hours: float = 3.0
    """Timestamps may fall this far outside the folder's UTC day; further out is quarantined."""
    batch: int = 8192
    """Rows per forward pass."""
    scheduler: str = field(default="threads", metadata={"choices": SCHEDULERS})
    """Dask scheduler: threads | sync."""
    workers: int | None = None
    """Threads (default: all cores)."""

    def __post_init__(self) -> None:
        if isinstance(self.date, str):
            object.__setattr__(self, "date", dt.date.fromisoformat(self.date))
        for name in ("raw", "out", "model"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")
        if not self.out.endswith(".parquet"):
            raise ValueError(f"out must name a .parquet file, got {self.out!r}")
        if not self.max_skew_hours >= 0:
            raise ValueError(f"max_skew_hours must be >= 0, got {self.max_skew_hours}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be threads or sync, got {self.scheduler!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
