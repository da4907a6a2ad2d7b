"""Typed configuration of the preprocess stage."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass

SCHEDULERS = ("threads", "processes", "sync", "local-cluster")
_ADDRESS = re.compile(r"^(tcp|tls|inproc|ucx)://\S+$")

# Log-spaced edges (seconds) for the time between a history click and the
# exposure: under a minute, minutes, hours, days, weeks. Bucket 0 = padding.
GAP_EDGES_SECONDS: tuple[int, ...] = (
    60,
    300,
    900,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86_400,
    2 * 86_400,
    4 * 86_400,
    7 * 86_400,
    14 * 86_400,
    30 * 86_400,
)


@dataclass(frozen=True)
class PreprocessConfig:
    """What to read, how to turn it into training arrays, and where to write.

    The window is ``days`` day folders ending at ``end_date``: the last
    ``test_days`` are the test split, the ``val_days`` before them validation,
    the rest training. ``history_days`` more folders before the window are
    read only to fill behaviour histories; their rows are never samples.
    """

    raw: str
    """Raw events root (local path or fsspec URI) holding `dt=YYYY-MM-DD/` folders."""
    out: str
    """Dataset folder to write (local path or mounted volume: memmaps need a filesystem)."""
    end_date: dt.date | None = None
    """Last day of the window, YYYY-MM-DD (default: the latest day folder present)."""
    days: int = 14
    """Days in the window (train + val + test)."""
    history_days: int = 7
    """Look-back days read only for behaviour histories."""
    val_days: int = 1
    """Days of the validation split (just before the test days)."""
    test_days: int = 1
    """Days of the test split (the last days of the window)."""
    seq_len: int = 20
    """Behaviour history length L (most recent clicks, right-aligned)."""
    neg_len: int = 10
    """Recent skipped exposures (shown, not clicked) kept per row, right-aligned."""
    item_buckets: int = 1 << 18
    """Hash buckets for item ids (bucket 0 = padding)."""
    category_buckets: int = 1 << 12
    """Hash buckets for category ids (bucket 0 = padding / missing)."""
    user_buckets: int = 1 << 18
    """Hash buckets for user ids."""
    max_skew_hours: float = 3.0
    """Timestamps may fall this far outside their folder's UTC day; further out is quarantined."""
    max_quarantine_fraction: float = 0.1
    """Stop with an error when more than this fraction of rows read is quarantined, overall or on any one day."""
    max_duplicate_fraction: float = 0.1
    """Stop with an error when more than this fraction of one day's rows are exact duplicates."""
    rows_per_partition: int = 500_000
    """Target rows per partition after the shuffle by user (bounds memory per task)."""
    shuffle_buffer_mb: int = 128
    """Memory Dask's local disk shuffle may buffer before spilling to disk."""
    scheduler: str = "threads"
    """Dask scheduler: threads | processes | sync | local-cluster | a scheduler address (tcp://host:port; on
    Kubernetes the pipeline starts a DaskCluster and passes its address: kube.client.preprocess_cluster)."""
    workers: int | None = None
    """Threads/processes/workers for local schedulers (default: all cores)."""
    force: bool = False
    """Recompute even when `out` already holds a dataset with the same fingerprint."""

    def __post_init__(self) -> None:
        if not self.raw:
            raise ValueError("raw: the raw events location must be given")
        if not self.out:
            raise ValueError("out: the output folder must be given")
        if isinstance(self.end_date, str):
            object.__setattr__(self, "end_date", dt.date.fromisoformat(self.end_date))
        for name in (
            "days",
            "val_days",
            "test_days",
            "seq_len",
            "neg_len",
            "rows_per_partition",
            "shuffle_buffer_mb",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.history_days < 0:
            raise ValueError(f"history_days must be >= 0, got {self.history_days}")
        if self.days <= self.val_days + self.test_days:
            raise ValueError(
                f"days ({self.days}) must exceed val_days + test_days "
                f"({self.val_days} + {self.test_days}) to leave training days"
            )
        for name in ("item_buckets", "category_buckets", "user_buckets"):
            value = getattr(self, name)
            if not 2 <= value <= 2**31 - 1:
                raise ValueError(f"{name} must be in [2, 2**31 - 1], got {value}")
        if self.max_skew_hours < 0:
            raise ValueError(f"max_skew_hours must be >= 0, got {self.max_skew_hours}")
        for name in ("max_quarantine_fraction", "max_duplicate_fraction"):
            if not 0 <= getattr(self, name) <= 1:  # also refuses NaN
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.scheduler not in SCHEDULERS and not _ADDRESS.match(self.scheduler):
            raise ValueError(
                f"scheduler must be one of {', '.join(SCHEDULERS)} or an address like "
                f"tcp://host:8786, got {self.scheduler!r}"
            )

    def result_fields(self) -> dict:
        """The fields that change the output bytes (part of the fingerprint)."""
        skip = {"raw", "out", "scheduler", "workers", "force", "shuffle_buffer_mb"}
        return {
            f.name: (
                getattr(self, f.name).isoformat()
                if f.name == "end_date" and self.end_date
                else getattr(self, f.name)
            )
            for f in dataclasses.fields(self)
            if f.name not in skip
        } | {"gap_edges_seconds": list(GAP_EDGES_SECONDS)}
