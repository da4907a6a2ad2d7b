"""Behaviour sequences: for every exposure, the user's last L clicks (and last skipped
exposures) strictly before it.

Vectorized over a whole partition: rows sorted by (user, time, tie-break),
clicks located with one ``searchsorted``, histories gathered with one fancy
index per chunk of rows. No Python loop over users or rows.
"""

from __future__ import annotations

import numpy as np

# Rows gathered at once: bounds the [rows, L] int64 index temporaries.
GATHER_CHUNK = 65_536


def sort_order(
    user_key: np.ndarray,
    ts: np.ndarray,
    item_key: np.ndarray,
    cat_key: np.ndarray,
    label: np.ndarray,
    day: np.ndarray,
) -> np.ndarray:
    """The canonical row order: user, time, then every other field.

    Rows that tie on all of these are identical in everything written, so the
    output bytes do not depend on how Dask happened to partition the input;
    and exact duplicates end up next to each other.
    """
    return np.lexsort((day, label, cat_key, item_key, ts, user_key))


def build_histories(
    user_key: np.ndarray,
    ts: np.ndarray,
    events: np.ndarray,
    item: np.ndarray,
    cat: np.ndarray,
    seq_len: int,
    gap_edges: np.ndarray,
    prefix: str = "hist",
) -> dict[str, np.ndarray]:
    """Histories for rows already in ``sort_order``: per row, the user's last ``seq_len``
    rows where ``events`` is true (the clicks: ``label == 1``; the skipped exposures:
    ``label == 0``) strictly before it.

    Returns ``<prefix>_item``/``<prefix>_cat`` (int32) and ``<prefix>_gap`` (uint8
    bucket of the seconds between event and exposure, 0 = padding), each
    ``[n, seq_len]`` right-aligned (column ``seq_len - 1`` is the most recent
    event), and ``<prefix>_len`` (int16). An event at the same second as the
    exposure is not in its history: "strictly before" is by timestamp, not by
    row order.
    """
    n = len(user_key)
    out = {
        f"{prefix}_item": np.zeros((n, seq_len), np.int32),
        f"{prefix}_cat": np.zeros((n, seq_len), np.int32),
        f"{prefix}_gap": np.zeros((n, seq_len), np.uint8),
        f"{prefix}_len": np.zeros(n, np.int16),
    }
    if n == 0:
        return out
    if len(gap_edges) > 254:
        raise ValueError("at most 254 gap edges fit a uint8 bucket")
    # Dense user number per row (rows are grouped by user), then one sortable key.
    new_user = np.empty(n, bool)
    new_user[0] = True
    np.not_equal(user_key[1:], user_key[:-1], out=new_user[1:])
    group = np.cumsum(new_user) - 1
    t0 = int(ts.min())
    span = int(ts.max()) - t0 + 1
    if int(group[-1] + 1) * span >= 2**62:
        raise ValueError("time span x users too large for one partition; use more partitions")
    row_key = group.astype(np.int64) * span + (ts - t0)
    clicks = np.flatnonzero(events)
    click_key = row_key[clicks]  # sorted, because rows are
    click_item, click_cat, click_ts = item[clicks], cat[clicks], ts[clicks]
    end = np.searchsorted(click_key, row_key, side="left")  # first click not strictly before
    first = np.searchsorted(click_key, group.astype(np.int64) * span, side="left")
    out[f"{prefix}_len"][:] = np.minimum(end - first, seq_len)
    offsets = np.arange(-seq_len, 0, dtype=np.int64)
    for lo in range(0, n, GATHER_CHUNK):
        hi = min(lo + GATHER_CHUNK, n)
        idx = end[lo:hi, None] + offsets
        valid = idx >= first[lo:hi, None]
        safe = np.where(valid, idx, 0)
        if len(clicks) == 0:
            continue
        out[f"{prefix}_item"][lo:hi] = np.where(valid, click_item[safe], 0)
        out[f"{prefix}_cat"][lo:hi] = np.where(valid, click_cat[safe], 0)
        gap = ts[lo:hi, None] - click_ts[safe]
        bucket = np.searchsorted(gap_edges, gap, side="right") + 1
        out[f"{prefix}_gap"][lo:hi] = np.where(valid, bucket, 0)
    return out


def context_features(ts: np.ndarray) -> np.ndarray:
    """``[n, 2]`` uint8: hour of day (0-23) and day of week (0 = Monday), both UTC."""
    seconds_of_day = ts % 86_400
    days = ts // 86_400
    return np.stack([seconds_of_day // 3600, (days + 3) % 7], axis=1).astype(np.uint8)


def duplicate_mask(*columns: np.ndarray) -> np.ndarray:
    """True for rows equal, in every column, to the row before (rows in sort order).

    Exact duplicates sort next to each other once all their fields are in the
    sort key, so one pass over neighbours finds them.
    """
    n = len(columns[0])
    dup = np.zeros(n, bool)
    if n > 1:
        same = np.ones(n - 1, bool)
        for column in columns:
            same &= column[1:] == column[:-1]
        dup[1:] = same
    return dup
