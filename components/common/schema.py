"""The raw-event contract every stage shares (see README, "Raw data contract").

Raw events live in one folder per day, ``<raw>/dt=YYYY-MM-DD/*.parquet|*.csv``.
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
OPTIONAL_COLUMNS: tuple[str, ...] = (CATEGORY_ID,)
CONTRACT_COLUMNS: tuple[str, ...] = (USER_ID, ITEM_ID, CATEGORY_ID, TIMESTAMP, LABEL)

RAW_SUFFIXES: tuple[str, ...] = (".parquet", ".csv")
DAY_FOLDER = re.compile(r"^dt=(\d{4}-\d{2}-\d{2})$")
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


def day_start_epoch(day: dt.date) -> int:
    """Epoch seconds of 00:00 UTC on ``day``."""
    return int(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def epoch_day(day: dt.date) -> int:
    """Days since 1970-01-01 (the integer day number used in arrays)."""
    return (day - dt.date(1970, 1, 1)).days
