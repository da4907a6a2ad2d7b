"""Breakages a daily log meets, applied to one generated day: what the data guards must catch.

Each takes the day's frame and the day before's (raw columns: user_id, item_id, category_id,
timestamp, label) and returns the broken day. Used by the guards' tests and ``make bench-gate``;
``break_day`` rewrites one day folder of a raw root in place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd


def labels_lost(day: pd.DataFrame, _: pd.DataFrame) -> pd.DataFrame:
    """99% of the clicks logged as non-clicks (a broken click logger)."""
    clicks = np.flatnonzero(day["label"].to_numpy() == 1)
    day = day.copy()
    day["label"] = np.int8(0)
    day.loc[clicks[::100], "label"] = np.int8(1)
    return day


def volume(day: pd.DataFrame, _: pd.DataFrame) -> pd.DataFrame:
    """3% of the usual rows (at 1% a small day keeps no click and preprocess refuses it)."""
    return day.iloc[::30].reset_index(drop=True)


def new_ids(day: pd.DataFrame, _: pd.DataFrame) -> pd.DataFrame:
    """A new id space for users and items after an upstream change."""
    day = day.copy()
    day["user_id"] += 10_000_000
    day["item_id"] += 10_000_000
    return day


def replayed_day(_: pd.DataFrame, previous: pd.DataFrame) -> pd.DataFrame:
    """Yesterday's rows delivered again under today's date."""
    day = previous.copy()
    day["timestamp"] += 86_400
    return day


def categories_remapped(day: pd.DataFrame, _: pd.DataFrame) -> pd.DataFrame:
    """Category ids remapped upstream: every category-level feature jumps."""
    day = day.copy()
    day["category_id"] = (day["category_id"] * 7919 + 13) % 100_003 + 1_000
    return day


def batch_times(day: pd.DataFrame, _: pd.DataFrame) -> pd.DataFrame:
    """Every event stamped with the hour its batch was written (a logger that lost event times):
    the time-since features of the day jump."""
    day = day.copy()
    day["timestamp"] = day["timestamp"] // 3600 * 3600
    return day.drop_duplicates(["user_id", "item_id", "category_id", "timestamp", "label"])


def one_user_floods(day: pd.DataFrame, _: pd.DataFrame) -> pd.DataFrame:
    """80% of the day's rows logged under one user (a bot, a crawler, a test account): the volume
    and click rate can stay as usual while one user decides the day."""
    day = day.copy()
    picked = np.random.default_rng(0).random(len(day)) < 0.8
    day.loc[picked, "user_id"] = day["user_id"].iloc[0]
    return day.drop_duplicates(["user_id", "item_id", "category_id", "timestamp", "label"])


BREAKAGES: dict[str, tuple[Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame], str]] = {
    "clicks logged as non-clicks (99%)": (labels_lost, "click rate"),
    "3% of the usual volume": (volume, "rows"),
    "a new id space for users and items": (new_ids, "new users"),
    "yesterday delivered again as today": (replayed_day, "repeat rows of an earlier day"),
    "category ids remapped upstream": (categories_remapped, "category"),
    "event times lost (stamped by the hour)": (batch_times, "feature"),
    "one user holds 80% of the day": (one_user_floods, "one user holds"),
}
"""Name -> (the breakage, words the guard's finding about it contains)."""


def _day_file(raw: Path, day: dt.date) -> Path:
    return next((raw / f"dt={day.isoformat()}").glob("*.parquet"))


def break_day(raw: str | Path, day: dt.date, breakage: Callable) -> Path:
    """Rewrite day folder ``day`` of the raw root ``raw`` through ``breakage``; its file's path."""
    raw = Path(raw)
    path = _day_file(raw, day)
    broken = breakage(pd.read_parquet(path), pd.read_parquet(_day_file(raw, day - dt.timedelta(1))))
    path.unlink()
    broken.to_parquet(path, index=False)
    return path
