"""Row-level validation: parse, check and hash one piece of raw events.

Columns are read through their Arrow types (never through pandas' float64
nullable path). A row is kept or quarantined with exactly one reason (the
first that applies, in ``REASONS`` order); nothing is dropped silently. A
column whose *type* cannot hold its values without loss (a date-only or
float32 timestamp, a timestamp as an id) is refused for the whole file by
:func:`column_type_problem` before any row is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from components.common import schema
from components.common.hashing import id_keys, id_type_problem

# reason -> the contract column it is about; the order is the precedence
REASONS: dict[str, str] = {
    "null_user_id": schema.USER_ID,
    "bad_user_id": schema.USER_ID,
    "null_item_id": schema.ITEM_ID,
    "bad_item_id": schema.ITEM_ID,
    "bad_category_id": schema.CATEGORY_ID,
    "bad_timestamp": schema.TIMESTAMP,
    "timestamp_out_of_range": schema.TIMESTAMP,
    "bad_label": schema.LABEL,
}
REASON_CODES = {name: code for code, name in enumerate(REASONS, start=1)}

# The columns of cleaned rows; keys are full 64-bit id hashes, buckets come later.
# Kept narrow: every byte here crosses the shuffle.
CLEAN_COLUMNS = {
    "user_key": np.int64,
    "item_key": np.int64,
    "cat_key": np.int64,
    "ts": np.int64,
    "label": np.int8,
    "day": np.int32,
}
QUARANTINE_COLUMNS = ["file", "row", "reason", "column", *schema.CONTRACT_COLUMNS]

_TRUE_LABELS = {"true"}
_FALSE_LABELS = {"false"}
MAX_ABS_SECONDS = 1e17  # beyond: cannot be a time at all (year ~3e9)
_TIME_OF_DAY = re.compile(r"\d:\d\d")  # ISO text must carry a time, not just a date


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


def column_type_problem(column: str, type_: pa.DataType) -> str | None:
    """Why a contract column of this Arrow type cannot be read without loss (None: it can)."""
    if pa.types.is_dictionary(type_):
        return column_type_problem(column, type_.value_type)
    if pa.types.is_nested(type_):
        return f"has nested type {type_}; expected strings, numbers, booleans or timestamps"
    if column in (schema.USER_ID, schema.ITEM_ID, schema.CATEGORY_ID):
        problem = id_type_problem(type_)
        return f"has {problem}" if problem else None
    if column == schema.TIMESTAMP:
        if pa.types.is_date(type_):
            return (
                f"has date-only type {type_}: every row would be midnight and same-day events "
                "would merge as duplicates; write a timestamp, epoch seconds or ISO-8601 text"
            )
        if pa.types.is_floating(type_) and type_.bit_width < 64:
            return (
                f"has type {type_}: today's epoch seconds do not fit it exactly (float32 rounds "
                "them to 128-second steps); write int64 or float64 seconds, or a timestamp"
            )
        if (
            pa.types.is_timestamp(type_)
            or pa.types.is_integer(type_)
            or pa.types.is_floating(type_)
            or pa.types.is_decimal(type_)
            or _is_text(type_)
            or pa.types.is_null(type_)
        ):
            return None
        return (
            f"has type {type_}; expected a timestamp, epoch seconds (integer or float64) "
            "or ISO-8601 text"
        )
    if column == schema.LABEL:
        if (
            pa.types.is_boolean(type_)
            or pa.types.is_integer(type_)
            or pa.types.is_floating(type_)
            or pa.types.is_decimal(type_)
            or _is_text(type_)
            or pa.types.is_null(type_)
        ):
            return None
        return f"has type {type_}; expected 0/1 numbers, booleans or the text 0/1/true/false"
    return None


def _is_text(type_: pa.DataType) -> bool:
    return (
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_string_view(type_)
    )


def _arrow(values) -> pa.Array:
    """One Arrow array (dictionary decoded) from Arrow or pandas values."""
    if isinstance(values, pd.Series):
        values = pa.Array.from_pandas(values)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if _is_text(values.type) and not pa.types.is_string(values.type):
        values = values.cast(pa.large_string())
    return values


def _numbers(values: pa.Array) -> np.ndarray:
    """float64 of a numeric Arrow array, NaN where null. Unchecked cast: an integer beyond 2**53
    rounds (it is never a valid label or time anyway) instead of raising."""
    return (
        pc.cast(values, pa.float64(), safe=False).to_numpy(zero_copy_only=False).astype(np.float64)
    )


def parse_timestamps(values) -> tuple[np.ndarray, np.ndarray]:
    """Whole epoch seconds (int64) and a validity mask.

    Accepts Arrow timestamps of any unit, with or without a time zone (none =
    UTC); integer epoch seconds (exact); float64 or decimal epoch seconds
    (fractions floored: 12.9 s is second 12); and text holding epoch seconds or
    ISO-8601 with a time of day (no zone = UTC). A date with no time of day is
    invalid: it would put every event at midnight.
    """
    values = _arrow(values)
    type_ = values.type
    n = len(values)
    present = ~values.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(type_):
        raw = pc.fill_null(pc.cast(values, pa.int64()), 0).to_numpy(zero_copy_only=False)
        per_second = 10 ** {"s": 0, "ms": 3, "us": 6, "ns": 9}[type_.unit]
        return np.where(present, raw // per_second, 0).astype(np.int64), present
    if pa.types.is_integer(type_):
        raw = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
        if pa.types.is_unsigned_integer(type_):  # above int64's range: no time at all
            present &= raw <= np.iinfo(np.int64).max
            raw = np.where(present, raw, 0)
        seconds = raw.astype(np.int64)
        valid = present & (np.abs(seconds) < MAX_ABS_SECONDS)
        return np.where(valid, seconds, 0), valid
    if pa.types.is_floating(type_) or pa.types.is_decimal(type_):
        return _float_seconds(_numbers(values))
    if _is_text(type_):
        return _text_seconds(values)
    return np.zeros(n, np.int64), np.zeros(n, bool)  # null type, or a type refused at scan


def _float_seconds(seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    valid = np.isfinite(seconds) & (np.abs(np.nan_to_num(seconds)) < MAX_ABS_SECONDS)
    return np.where(valid, np.floor(np.where(valid, seconds, 0)), 0).astype(np.int64), valid


def _text_seconds(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    # "2026-03-01 10:00:00 UTC" (BigQuery's export) is ISO-8601 with the zone spelled out
    trimmed = pc.replace_substring_regex(pc.utf8_trim_whitespace(values), r"(?i)\s*UTC$", "+00:00")
    text = pd.Series(trimmed.to_numpy(zero_copy_only=False), dtype=object)
    seconds = (
        pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan).copy()
    )
    text_rows = np.isnan(seconds) & text.notna().to_numpy()
    if text_rows.any():
        candidates = text[text_rows]
        parsed = pd.to_datetime(candidates, format="ISO8601", utc=True, errors="coerce")
        has_time = candidates.str.contains(_TIME_OF_DAY).fillna(False).to_numpy(dtype=bool)
        parsed_seconds = _datetime_seconds(parsed).astype(np.float64)
        seconds[text_rows] = np.where(parsed.isna().to_numpy() | ~has_time, np.nan, parsed_seconds)
    return _float_seconds(seconds)


def _datetime_seconds(values: pd.Series) -> np.ndarray:
    """Whole epoch seconds of a tz-aware datetime Series (NaT -> 0)."""
    # Stay in the Series' own unit: a cast to nanoseconds overflows (OutOfBoundsDatetime) for
    # years outside 1677..2262, e.g. "9999-12-31T23:59:59Z".
    naive = values.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    per_second = 10 ** {"s": 0, "ms": 3, "us": 6, "ns": 9}[np.datetime_data(naive.dtype)[0]]
    return np.where(values.isna().to_numpy(), 0, naive.view(np.int64) // per_second)


def parse_labels(values) -> tuple[np.ndarray, np.ndarray]:
    """Labels as int8 and a validity mask: numbers equal to 0 or 1 (``0.00`` and ``1.00``
    included), booleans, or text holding such a number or true/false."""
    values = _arrow(values)
    type_ = values.type
    if pa.types.is_boolean(type_):
        valid = ~values.is_null().to_numpy(zero_copy_only=False)
        return pc.fill_null(values, False).to_numpy(zero_copy_only=False).astype(np.int8), valid
    if pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_decimal(type_):
        numbers = _numbers(values)
    elif _is_text(type_):
        text = pd.Series(
            pc.utf8_lower(pc.utf8_trim_whitespace(values)).to_numpy(zero_copy_only=False),
            dtype=object,
        )
        numbers = (
            pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan).copy()
        )
        numbers[text.isin(_TRUE_LABELS).to_numpy()] = 1
        numbers[text.isin(_FALSE_LABELS).to_numpy()] = 0
    else:
        return np.zeros(len(values), np.int8), np.zeros(len(values), bool)
    valid = (numbers == 0) | (numbers == 1)
    return np.where(valid, numbers, 0).astype(np.int8), valid


def clean_table(
    table: pa.Table, file_index: int, row_offset: int, window: DayWindow
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """Split one piece into cleaned rows, quarantined rows, and per-reason counts."""
    n = table.num_rows
    user_key, user_null, user_bad = id_keys(table.column(schema.USER_ID))
    item_key, item_null, item_bad = id_keys(table.column(schema.ITEM_ID))
    if schema.CATEGORY_ID in table.column_names:
        cat_key, _, cat_bad = id_keys(table.column(schema.CATEGORY_ID))  # null = key 0 = unknown
    else:
        cat_key, cat_bad = np.zeros(n, np.int64), np.zeros(n, bool)
    ts, ts_valid = parse_timestamps(table.column(schema.TIMESTAMP))
    label, label_valid = parse_labels(table.column(schema.LABEL))

    reason = np.zeros(n, np.int8)
    checks = {
        "null_user_id": user_null,
        "bad_user_id": user_bad,
        "null_item_id": item_null,
        "bad_item_id": item_bad,
        "bad_category_id": cat_bad,
        "bad_timestamp": ~ts_valid,
        "timestamp_out_of_range": ts_valid & ((ts < window.min_ts) | (ts >= window.max_ts)),
        "bad_label": ~label_valid,
    }
    for name, failed in checks.items():
        reason[(reason == 0) & failed] = REASON_CODES[name]

    rows = np.arange(row_offset, row_offset + n, dtype=np.int64)
    keep = reason == 0
    clean = pd.DataFrame(
        {
            "user_key": user_key[keep],
            "item_key": item_key[keep],
            "cat_key": cat_key[keep],
            "ts": ts[keep],
            "label": label[keep],
            "day": np.full(int(keep.sum()), window.day_number, np.int32),
        }
    )
    counts = {name: int((reason == code).sum()) for name, code in REASON_CODES.items()}
    quarantine = _quarantine_frame(table, ~keep, reason, file_index, rows)
    return clean, quarantine, counts


def _quarantine_frame(table: pa.Table, bad, reason, file_index, rows) -> pd.DataFrame:
    """Quarantined rows with their original values as text, so any input type fits."""
    names = list(REASONS)
    out = pd.DataFrame(
        {
            "file": np.full(int(bad.sum()), file_index, np.int32),
            "row": rows[bad],
            "reason": [names[c - 1] for c in reason[bad]],
        }
    )
    out["column"] = out["reason"].map(REASONS)
    picked = table.filter(pa.array(bad)) if bad.any() else None
    for column in schema.CONTRACT_COLUMNS:
        if picked is not None and column in picked.column_names:
            out[column] = pd.Series(
                [None if v is None else str(v) for v in picked.column(column).to_pylist()],
                dtype=object,
            )
        else:
            out[column] = pd.Series([None] * len(out), dtype=object)
    return out[QUARANTINE_COLUMNS]
