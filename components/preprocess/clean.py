"""Row-level validation: parse, check and hash one piece of raw events.

A row is kept or quarantined with exactly one reason (the first that
applies, in ``REASONS`` order); nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from components.common import schema
from components.common.hashing import hash_ids

# reason -> the contract column it is about; the order is the precedence
REASONS: dict[str, str] = {
    "null_user_id": schema.USER_ID,
    "null_item_id": schema.ITEM_ID,
    "bad_timestamp": schema.TIMESTAMP,
    "timestamp_out_of_range": schema.TIMESTAMP,
    "bad_label": schema.LABEL,
}
REASON_CODES = {name: code for code, name in enumerate(REASONS, start=1)}

# The columns of cleaned rows; keys are full 64-bit id hashes, buckets come later.
# Kept narrow: every byte here crosses the shuffle.
CLEAN_COLUMNS = {
    "user_key": np.int64, "item_key": np.int64, "cat_key": np.int64,
    "ts": np.int64, "label": np.int8, "day": np.int32,
}
QUARANTINE_COLUMNS = ["file", "row", "reason", "column", *schema.CONTRACT_COLUMNS]

_TRUE_LABELS = {"1", "1.0", "true"}
_FALSE_LABELS = {"0", "0.0", "false"}


@dataclass(frozen=True)
class DayWindow:
    """Accepted timestamp range for rows of one day folder."""

    day_number: int  # days since epoch of the folder's day
    min_ts: int
    max_ts: int  # exclusive

    @classmethod
    def for_day(cls, day_number: int, max_skew_hours: float) -> DayWindow:
        skew = int(round(max_skew_hours * 3600))
        start = day_number * schema.SECONDS_PER_DAY
        return cls(day_number, start - skew, start + schema.SECONDS_PER_DAY + skew)


def parse_timestamps(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Epoch seconds (int64) and a validity mask from epoch numbers, ISO-8601 text or datetimes."""
    if pd.api.types.is_datetime64_any_dtype(column):
        values = column.dt.tz_localize("UTC") if column.dt.tz is None else column.dt.tz_convert("UTC")
        valid = values.notna().to_numpy()
        return np.where(valid, _datetime_seconds(values), 0), valid
    if pd.api.types.is_bool_dtype(column):
        return np.zeros(len(column), np.int64), np.zeros(len(column), bool)
    numeric = pd.to_numeric(column, errors="coerce")
    seconds = numeric.to_numpy(dtype=np.float64, na_value=np.nan).copy()
    if not pd.api.types.is_numeric_dtype(column):
        text_rows = np.isnan(seconds) & column.notna().to_numpy()
        if text_rows.any():
            parsed = pd.to_datetime(column[text_rows], format="ISO8601", utc=True, errors="coerce")
            seconds[text_rows] = _datetime_seconds(parsed).astype(np.float64)
            seconds[np.flatnonzero(text_rows)[parsed.isna().to_numpy()]] = np.nan
    valid = np.isfinite(seconds) & (np.abs(seconds) < 1e17)  # beyond: cannot be a time at all
    return np.where(valid, np.floor(np.where(valid, seconds, 0)), 0).astype(np.int64), valid


def _datetime_seconds(values: pd.Series) -> np.ndarray:
    """Whole epoch seconds of a tz-aware datetime Series (NaT -> 0)."""
    # Stay in the Series' own unit: a cast to nanoseconds overflows (OutOfBoundsDatetime) for
    # years outside 1677..2262, e.g. "9999-12-31T23:59:59Z" or a Parquet timestamp[us] of year 1.
    naive = values.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    per_second = 10 ** {"s": 0, "ms": 3, "us": 6, "ns": 9}[np.datetime_data(naive.dtype)[0]]
    return np.where(values.isna().to_numpy(), 0, naive.view(np.int64) // per_second)


def parse_labels(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Labels as int8 and a validity mask: 0/1 numbers, booleans, or the text 0/1/true/false."""
    if pd.api.types.is_bool_dtype(column):
        valid = column.notna().to_numpy()
        return column.fillna(False).to_numpy(dtype=np.int8), valid
    if pd.api.types.is_numeric_dtype(column):
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
        valid = (values == 0) | (values == 1)
        return np.where(valid, values, 0).astype(np.int8), valid
    text = column.astype(object).where(column.notna(), "").astype(str).str.strip().str.lower()
    ones = text.isin(_TRUE_LABELS).to_numpy()
    zeros = text.isin(_FALSE_LABELS).to_numpy()
    return ones.astype(np.int8), ones | zeros


def clean_table(
    table: pa.Table, file_index: int, row_offset: int, window: DayWindow
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """Split one piece into cleaned rows, quarantined rows, and per-reason counts."""
    frame = table.to_pandas()
    n = len(frame)
    user_key, user_null = hash_ids(frame[schema.USER_ID])
    item_key, item_null = hash_ids(frame[schema.ITEM_ID])
    if schema.CATEGORY_ID in frame:
        cat_key, _ = hash_ids(frame[schema.CATEGORY_ID])  # a missing category is key 0 = unknown
    else:
        cat_key = np.zeros(n, np.int64)
    ts, ts_valid = parse_timestamps(frame[schema.TIMESTAMP])
    label, label_valid = parse_labels(frame[schema.LABEL])

    reason = np.zeros(n, np.int8)
    checks = {
        "null_user_id": user_null,
        "null_item_id": item_null,
        "bad_timestamp": ~ts_valid,
        "timestamp_out_of_range": ts_valid & ((ts < window.min_ts) | (ts >= window.max_ts)),
        "bad_label": ~label_valid,
    }
    for name, failed in checks.items():
        reason[(reason == 0) & failed] = REASON_CODES[name]

    rows = np.arange(row_offset, row_offset + n, dtype=np.int64)
    keep = reason == 0
    clean = pd.DataFrame({
        "user_key": user_key[keep], "item_key": item_key[keep], "cat_key": cat_key[keep],
        "ts": ts[keep], "label": label[keep],
        "day": np.full(int(keep.sum()), window.day_number, np.int32),
    })
    counts = {name: int((reason == code).sum()) for name, code in REASON_CODES.items()}
    quarantine = _quarantine_frame(frame, ~keep, reason, file_index, rows)
    return clean, quarantine, counts


def _quarantine_frame(frame, bad, reason, file_index, rows) -> pd.DataFrame:
    """Quarantined rows with their original values as text, so any input type fits."""
    names = list(REASONS)
    out = pd.DataFrame({
        "file": np.full(int(bad.sum()), file_index, np.int32),
        "row": rows[bad],
        "reason": [names[c - 1] for c in reason[bad]],
    })
    out["column"] = out["reason"].map(REASONS)
    for column in schema.CONTRACT_COLUMNS:
        if column in frame:
            values = frame[column][bad]
            out[column] = values.astype(object).where(values.notna(), None).map(
                lambda v: None if v is None else str(v)).to_numpy()
        else:
            out[column] = None
    return out[QUARANTINE_COLUMNS]


def empty_clean_frame() -> pd.DataFrame:
    return pd.DataFrame({name: np.empty(0, dtype) for name, dtype in CLEAN_COLUMNS.items()})
