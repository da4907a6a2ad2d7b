"""The raw-event contract every stage shares (docs/data.md, "Raw data contract").

Raw events live in one folder per day, ``<raw>/dt=YYYY-MM-DD/*.parquet|*.csv``
(also ``.pq``, gzip/bzip2/zstd CSV, and files in sub-folders of a day folder
such as Spark's ``hour=00/``).
"""

from __future__ import annotations

import datetime as dt
import re

USER_ID = "user_id"
ITEM_ID = "item_id"
CATEGORY_ID = "category_id"
TIMESTAMP = "timestamp"
LABEL = "label"

REQUIRED_COLUMNS: tuple[str, ...] = (USER_ID, ITEM_ID, TIMESTAMP, LABEL)
CONTRACT_COLUMNS: tuple[str, ...] = (USER_ID, ITEM_ID, CATEGORY_ID, TIMESTAMP, LABEL)

# file name ending -> (format, compression); the longest matching ending wins
RAW_FORMATS: dict[str, tuple[str, str | None]] = {
    ".parquet": ("parquet", None),
    ".pq": ("parquet", None),
    ".csv": ("csv", None),
    ".csv.gz": ("csv", "gzip"),
    ".csv.gzip": ("csv", "gzip"),
    ".csv.bz2": ("csv", "bz2"),
    ".csv.zst": ("csv", "zstd"),
    ".csv.zstd": ("csv", "zstd"),
}
# Data files compressed in a way the reader does not take: refused, never skipped.
UNREAD_COMPRESSIONS: tuple[str, ...] = (
    ".snappy",
    ".lz4",
    ".deflate",
    ".zip",
    ".xz",
    ".lzma",
    ".br",
    ".7z",
    ".lzo",
    ".z",
    ".tar",
    ".tgz",
)
DAY_FOLDER = re.compile(r"^dt=(\d{4}-\d{2}-\d{2})$")
# What a misnamed day folder may mean: dt=2026-1-5, dt=20260105, dt=2026-02-30, date=2026-03-05,
# DT=2026-03-05, 2026-03-05, dt=2026-03-05.bak ...
_LOOSE_DAY = re.compile(r"(?<!\d)(\d{4})[-_/.](\d{1,2})[-_/.](\d{1,2})(?!\d)")
_COMPACT_DAY = re.compile(r"(?<!\d)(\d{4})(\d{2})(\d{2})(?!\d)")
SECONDS_PER_DAY = 86_400


def day_folder_name(day: dt.date) -> str:
    """The folder name of one day of raw events: ``dt=YYYY-MM-DD``."""
    return f"dt={day.isoformat()}"


def parse_day_folder(name: str) -> dt.date | None:
    """The date of a ``dt=YYYY-MM-DD`` folder name, or None for any other name."""
    match = DAY_FOLDER.match(name)
    if not match:
        return None
    try:
        return dt.date.fromisoformat(match.group(1))
    except ValueError:
        return None


def loose_day_numbers(name: str) -> tuple[int, int, int] | None:
    """(year, month, day) a folder name that is no valid day folder seems to mean, or None.

    ``dt=2026-1-5`` gives (2026, 1, 5); ``dt=2026-13-45`` gives (2026, 13, 45) (no date, but it
    sorts after every day of 2026-12): enough to tell whether it may belong to a window.
    """
    match = _LOOSE_DAY.search(name) or _COMPACT_DAY.search(name)
    return tuple(int(g) for g in match.groups()) if match else None


def raw_format(name: str) -> tuple[str, str | None] | None:
    """(format, compression) of a raw file name, or None when it is no raw data file."""
    lower = name.lower()
    endings = [e for e in RAW_FORMATS if lower.endswith(e)]
    return RAW_FORMATS[max(endings, key=len)] if endings else None


def day_start_epoch(day: dt.date) -> int:
    """Epoch seconds of 00:00 UTC on ``day``."""
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def epoch_day(day: dt.date) -> int:
    """Days since 1970-01-01 (the integer day number used in arrays)."""
    return (day - dt.date(1970, 1, 1)).days
