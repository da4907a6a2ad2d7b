"""Raw-id requests -> the model's input arrays, with preprocess's own code.

A request is a table in the raw contract's terms, one row per (user, item)
to score:

* ``user_id``, ``item_id`` (strings or integers, int64 included),
  ``category_id`` (optional; null = unknown), ``timestamp`` (epoch seconds or
  ISO-8601);
* optionally the user's events before it, as lists of equal length per row:
  ``events_item_id``, ``events_timestamp``, ``events_label`` (0/1) and
  ``events_category_id`` (optional). A row without them (column absent, or
  null in that row) uses the user's events in the model's snapshot.

Ids are hashed and parsed by the preprocess stage's functions
(:mod:`components.common.hashing`, :mod:`components.preprocess.clean`); the
arrays come from :func:`components.preprocess.rows.model_inputs`, the function
preprocess builds the dataset with. Each row is scored as if it were the
next event of its user: it sees its user's events strictly before its
timestamp (never the other rows of the request), and the item and category
counts of the snapshot (the training window's :class:`CounterState` at its
end). Given the events a dataset row had before it and the counts at its
time, the arrays are the dataset's, bit for bit (tests/unit/test_score_features.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from components.common.hashing import hash_ids
from components.preprocess.counts import CounterState
from components.preprocess.rows import model_inputs
from components.preprocess.sequences import duplicate_mask, sort_order

REQUIRED = ("user_id", "item_id", "timestamp")
OPTIONAL = ("category_id",)
EVENT_COLUMNS = ("events_item_id", "events_timestamp", "events_label")
EVENT_OPTIONAL = ("events_category_id",)
COLUMNS = (*REQUIRED, *OPTIONAL, *EVENT_COLUMNS, *EVENT_OPTIONAL)
MAX_EVENTS_PER_ROW = 10_000
"""Bounds a request's memory: more events than this for one row is refused."""
LATEST_SECONDS = 7_258_118_400
"""2200-01-01: timestamps must lie in 1970 .. 2200 (keeps the history key arithmetic in range)."""
COUNT_STATE, USER_EVENTS = "count_state.npz", "user_events.parquet"
EVENT_KEYS = ("user_key", "item_key", "cat_key", "ts", "label")


class RequestError(ValueError):
    """A request the model cannot score; the message names the row and column, on one line."""


@dataclass(frozen=True)
class Layout:
    """Bucket counts and sequence lengths of a model (its vocab), as :func:`model_inputs` takes them."""

    item_buckets: int
    category_buckets: int
    user_buckets: int
    seq_len: int
    neg_len: int

    @classmethod
    def of(cls, vocab) -> Layout:
        return cls(vocab.item, vocab.category, vocab.user, vocab.seq_len, vocab.neg_len)


@dataclass
class Snapshot:
    """What a model version knows as of the end of its training window.

    ``state``: the item and category counts; ``events``: every kept event of
    the window, look-back days included, as key columns sorted by user (None:
    requests must carry their events)."""

    state: CounterState
    events: dict[str, np.ndarray] | None = None

    @classmethod
    def load(cls, count_state: str | Path, user_events: str | Path | None = None) -> Snapshot:
        state = CounterState()
        with np.load(count_state) as saved:
            state.load_state_dict(dict(saved))
        events = None
        if user_events is not None:
            frame = pd.read_parquet(user_events)
            events = {k: frame[k].to_numpy(np.int64) for k in EVENT_KEYS}
        return cls(state, events)

    def user_events(self, user_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``events`` for each user: ``(row index into events, owner index into user_key)``."""
        keys = self.events["user_key"]
        start = np.searchsorted(keys, user_key, side="left")
        end = np.searchsorted(keys, user_key, side="right")
        return _ranges(start, end)


def write_snapshot(dataset: str | Path, out: str | Path) -> dict[str, Path]:
    """The snapshot files of a dataset (its ``count_state.npz``, its ``user_events/`` sorted by
    user into one Parquet file) written into ``out``; returns ``{name: path}``."""
    from components.preprocess.stage import COUNT_STATE_FILE
    from components.preprocess.stage import USER_EVENTS as EVENTS_DIR

    dataset, out = Path(dataset), Path(out)
    parts = sorted((dataset / EVENTS_DIR).glob("part-*.parquet"))
    if not (dataset / COUNT_STATE_FILE).is_file() or not parts:
        raise FileNotFoundError(
            f"{dataset}: no {COUNT_STATE_FILE} and {EVENTS_DIR}/ (written by preprocess "
            f"since the scorer's snapshot exists; preprocess the window again)"
        )
    out.mkdir(parents=True, exist_ok=True)
    state = out / COUNT_STATE
    state.write_bytes((dataset / COUNT_STATE_FILE).read_bytes())
    table = pa.concat_tables([pq.read_table(p, columns=list(EVENT_KEYS)) for p in parts])
    table = table.sort_by([(k, "ascending") for k in EVENT_KEYS])
    events = out / USER_EVENTS
    pq.write_table(table, events, compression="zstd")
    return {"count_state": state, "user_events": events}


def request_inputs(
    frame: pd.DataFrame, snapshot: Snapshot, layout: Layout
) -> dict[str, np.ndarray]:
    """The Dataset contract's arrays (all of ``array_specs``) for every request row, in request order."""
    unknown = [c for c in frame.columns if c not in COLUMNS]
    if unknown:
        raise RequestError(
            f"unknown column(s) {', '.join(map(str, unknown))}; a request has {', '.join(COLUMNS)}"
        )
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise RequestError(
            f"missing column(s) {', '.join(missing)}; required: {', '.join(REQUIRED)}"
        )
    n = len(frame)
    if n == 0:
        raise RequestError("the request has no rows")
    user = _ids(frame["user_id"], "user_id")
    item = _ids(frame["item_id"], "item_id")
    cat = (
        _ids(frame["category_id"], "category_id", nullable=True)
        if "category_id" in frame.columns
        else np.zeros(n, np.int64)
    )
    ts = _timestamps(frame["timestamp"], "timestamp")
    events, owner = _request_events(frame, user)
    given = np.zeros(n, bool)
    given[owner] = True
    if "events_item_id" in frame.columns:
        given |= frame["events_item_id"].notna().to_numpy()
    if snapshot.events is None and not given.all():
        raise RequestError(
            f"row {int(np.flatnonzero(~given)[0])}: no events given, and this model version "
            f"carries no snapshot of its users' events; send events_item_id, "
            f"events_timestamp, events_label"
        )
    return key_inputs(user, item, cat, ts, snapshot, layout, events, owner, given)


def key_inputs(
    user: np.ndarray,
    item: np.ndarray,
    cat: np.ndarray,
    ts: np.ndarray,
    snapshot: Snapshot,
    layout: Layout,
    events: dict[str, np.ndarray] | None = None,
    owner: np.ndarray | None = None,
    given: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of rows given as keys (hashed ids) and epoch seconds: each row with ``events`` (key
    columns; ``owner``: the row each belongs to) where ``given``, else its user's snapshot events."""
    n = len(user)
    if events is None:
        events, owner = {k: np.empty(0, np.int64) for k in EVENT_KEYS}, np.empty(0, np.int64)
    given = np.zeros(n, bool) if given is None else given
    if snapshot.events is not None and not given.all():
        rows, owners = snapshot.user_events(user)
        take = ~given[owners]
        rows, owners = rows[take], owners[take]
        events = {k: np.concatenate([events[k], snapshot.events[k][rows]]) for k in EVENT_KEYS}
        owner = np.concatenate([owner, owners])
    return _assemble(user, item, cat, ts, events, owner, snapshot.state, layout)


def _assemble(user, item, cat, ts, events, owner, state: CounterState, layout: Layout) -> dict:
    n = len(user)
    # exact duplicates among one row's events count once, as preprocess drops them
    order = sort_order(
        owner,
        events["ts"],
        events["item_key"],
        events["cat_key"],
        events["label"],
        np.zeros(len(owner), np.int8),
    )
    events = {k: v[order] for k, v in events.items()}
    owner = owner[order]
    dup = duplicate_mask(
        owner, events["ts"], events["item_key"], events["cat_key"], events["label"]
    )
    events = {k: v[~dup] for k, v in events.items()}
    owner = owner[~dup]
    # one group per request row: its events, then itself (label 0: it is never its own history)
    group = np.concatenate([owner, np.arange(n)]).astype(np.int64)
    target = np.concatenate([np.zeros(len(owner), bool), np.ones(n, bool)])
    cols = {
        "user_key": user[group],
        "item_key": np.concatenate([events["item_key"], item]),
        "cat_key": np.concatenate([events["cat_key"], cat]),
        "ts": np.concatenate([events["ts"], ts]),
        "label": np.concatenate([events["label"], np.zeros(n, np.int64)]).astype(np.int8),
    }
    order = sort_order(group, cols["ts"], cols["item_key"], cols["cat_key"], cols["label"], target)
    cols = {k: v[order] for k, v in cols.items()}
    group, target = group[order], target[order]
    # each row alone against the snapshot's counts: equal timestamps never see each other
    counts, prior = state.features(
        cols["item_key"][target],
        cols["cat_key"][target],
        np.zeros(n, np.int64),
        np.zeros(n, np.int64),
        fold=False,
    )
    global_columns = np.zeros((len(group), counts.shape[1]), np.float32)
    global_columns[target] = counts
    row_prior = np.full(len(group), 0.5)
    row_prior[target] = prior
    arrays = model_inputs(cols, global_columns, row_prior, layout, group=group)
    back = np.empty(n, np.int64)
    back[group[target]] = np.arange(n)
    return {k: v[target][back] for k, v in arrays.items()}


def _request_events(
    frame: pd.DataFrame, user: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The events sent with the request, flattened: key columns and the request row of each."""
    present = [c for c in (*EVENT_COLUMNS, *EVENT_OPTIONAL) if c in frame.columns]
    if not present:
        return {k: np.empty(0, np.int64) for k in EVENT_KEYS}, np.empty(0, np.int64)
    lacking = [c for c in EVENT_COLUMNS if c not in frame.columns]
    if lacking:
        raise RequestError(f"events need {', '.join(EVENT_COLUMNS)}; missing {', '.join(lacking)}")
    lists = {c: frame[c].tolist() for c in present}
    lengths = np.zeros(len(frame), np.int64)
    for i, value in enumerate(lists["events_item_id"]):
        if _is_null(value):
            if any(not _is_null(lists[c][i]) for c in present):
                raise RequestError(
                    f"row {i}: events_item_id is null but other events_* columns are not"
                )
            continue
        for c in present:
            other = lists[c][i]
            if c == "events_category_id" and _is_null(other):
                continue
            if not isinstance(other, list | tuple | np.ndarray):
                raise RequestError(f"row {i}: {c} must be a list, got {type(other).__name__}")
            if len(other) != len(value):
                raise RequestError(
                    f"row {i}: {c} has {len(other)} values, events_item_id {len(value)}"
                )
        if len(value) > MAX_EVENTS_PER_ROW:
            raise RequestError(
                f"row {i}: {len(value)} events; at most {MAX_EVENTS_PER_ROW} per row"
            )
        lengths[i] = len(value)
    owner = np.repeat(np.arange(len(frame)), lengths)

    def flat(column: str, fill=None) -> list:
        out = []
        for i, n in enumerate(lengths):
            value = lists[column][i] if column in lists else None
            out.extend(list(value) if n and not _is_null(value) else [fill] * int(n))
        return out

    where = [
        (int(r), j) for r, n in zip(range(len(frame)), lengths, strict=True) for j in range(int(n))
    ]
    events = {
        "user_key": user[owner],
        "item_key": _ids(flat("events_item_id"), "events_item_id", where=where),
        "cat_key": _ids(
            flat("events_category_id"), "events_category_id", nullable=True, where=where
        ),
        "ts": _timestamps(flat("events_timestamp"), "events_timestamp", where=where),
        "label": _labels(flat("events_label"), where),
    }
    return events, owner


def _ids(values, column: str, nullable: bool = False, where=None) -> np.ndarray:
    values = list(values.tolist() if hasattr(values, "tolist") else values)
    if not values:
        return np.empty(0, np.int64)
    keys, unusable = hash_ids(values)
    null = np.array([_is_null(v) for v in values])
    bad = unusable & ~null if nullable else unusable
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RequestError(
            f"{_row_label(i, where)}: {column} {_short_repr(values[i])} is no usable id "
            f"({'an empty value' if null[i] else 'a non-integral number or empty text'})"
        )
    return np.where(null, 0, keys).astype(np.int64) if nullable else keys


def _timestamps(values, column: str, where=None) -> np.ndarray:
    from components.preprocess.clean import parse_timestamps

    seconds, valid = parse_timestamps(_arrow(values))
    valid &= (seconds >= 0) & (seconds < LATEST_SECONDS)
    if not valid.all():
        i = int(np.flatnonzero(~valid)[0])
        shown = values.iloc[i] if hasattr(values, "iloc") else values[i]
        raise RequestError(
            f"{_row_label(i, where)}: {column} {_short_repr(shown)} is no time between 1970 and 2200 "
            f"(epoch seconds or ISO-8601 with a time of day)"
        )
    return seconds


def _labels(values: list, where) -> np.ndarray:
    from components.preprocess.clean import parse_labels

    if not values:
        return np.empty(0, np.int64)
    labels, valid = parse_labels(_arrow(values))
    if not valid.all():
        i = int(np.flatnonzero(~valid)[0])
        raise RequestError(
            f"{_row_label(i, where)}: events_label {_short_repr(values[i])} is not 0 or 1"
        )
    return labels.astype(np.int64)


def _arrow(values) -> pa.Array:
    """An Arrow array of request values; a column mixing numbers and text becomes text."""
    values = list(values.tolist() if hasattr(values, "tolist") else values)
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([None if _is_null(v) else str(v) for v in values], pa.string())


def _is_null(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def _row_label(i: int, where) -> str:
    if where is None:
        return f"row {i}"
    row, j = where[i]
    return f"row {row} event {j}"


def _short_repr(value) -> str:
    text = "null" if _is_null(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _ranges(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The concatenated ``range(start[i], end[i])`` and, for each element, its ``i``."""
    lengths = end - start
    owner = np.repeat(np.arange(len(start)), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return (np.repeat(start, lengths) + offsets).astype(np.int64), owner
