"""The test day as serving scores it.

A model version serves with its snapshot frozen at its window's end (the item and category
counts, each user's last clicks and skips and the user's counts: :mod:`components.score.features`).
The dataset's rows carry more: counts and histories up to each row, the day's own earlier events
included. Evaluate therefore scores the test split twice: with the dataset's arrays (what training
saw) and as served -- each test row built by serving's own code from a snapshot of the days before
the test day, never from the test day itself. Both models are served from the dataset's state as
of the test day's start: the staleness a version's snapshot has on the day it serves, since the
pipeline registers one a day. A test split of several days is served one day at a time
(:meth:`ServedSplit.days`), each day from the state at its own start, as the daily pipeline serves
them; scoring four weeks from one snapshot would measure a version kept unretrained for four weeks,
not the skew of the daily pipeline. The gate compares the two as served; the gap between the
candidate's two AUCs is the train-serve skew.

The test rows' keys come from the dataset's ``user_events/`` (every kept row's hashed keys),
matched to the test split's rows by user, time, buckets and label: a row's split follows its day
folder, not its timestamp, so the match is by content, and a match that is not exact is an error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from components.common.dataset import USER_EVENT_COLUMNS, USER_EVENTS_DIR
from components.common.hashing import bucketize
from components.common.schema import SECONDS_PER_DAY
from components.score.features import (
    SNAPSHOT_SECONDS,
    Layout,
    Snapshot,
    UserState,
    key_inputs,
    ranges,
    read_user_events,
    user_event_parts,
)

EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
MATCH = ("user_key", "ts", "target_item", "target_cat", "label")
"""The columns a test row is recognised by in ``user_events/``."""


class ServedError(ValueError):
    """The test split cannot be scored as served (its keys are missing or do not match)."""


@dataclass
class ServedSplit:
    """The test split's keys, lined up with the split's rows, and the window before it.

    ``keys``: ``USER_EVENT_COLUMNS`` columns of the test rows, row ``i`` being the split's row ``order[i]``
    in the order :func:`components.train.inference.split_rows` reads it; ``before``: the keys of
    every other row of the window (the days before the test day, look-back days included);
    ``day``: each test row's serving day, 0 for the split's first (:func:`serving_days`)."""

    keys: dict[str, np.ndarray]
    order: np.ndarray
    before: dict[str, np.ndarray]
    day: np.ndarray
    day_names: tuple[str, ...] = ()
    """The split's UTC days (ISO dates; none: served as one day, its start unknown)."""

    @classmethod
    def read(
        cls,
        data: str | Path,
        rows: dict[str, np.ndarray],
        layout: Layout,
        days: tuple[str, ...] = (),
    ) -> ServedSplit:
        """``rows``: the test split's ``MATCH`` columns in split order; ``days``: the split's UTC
        days (ISO dates, in order; none: served as one day)."""
        parts = user_event_parts(data)
        if not parts:
            raise ServedError(f"{data}: no {USER_EVENTS_DIR}/ to score the test split as served")
        events = read_user_events(parts)
        event_match = {
            "user_key": events["user_key"],
            "ts": events["ts"],
            "target_item": bucketize(events["item_key"], layout.item_buckets).astype(np.int64),
            "target_cat": bucketize(
                events["cat_key"], layout.category_buckets, null=events["cat_key"] == 0
            ).astype(np.int64),
            "label": events["label"],
        }
        split_rows, event_rows = _match(rows, event_match)
        if len(split_rows) != len(rows["label"]):
            raise ServedError(
                f"{data}: {len(rows['label']) - len(split_rows)} of {len(rows['label'])} test rows "
                f"have no row in {USER_EVENTS_DIR}/ (the dataset is not the one preprocess wrote)"
            )
        test = np.zeros(len(events["ts"]), bool)
        test[event_rows] = True
        by_user = np.lexsort((events["ts"][event_rows], events["user_key"][event_rows]))
        event_rows, split_rows = event_rows[by_user], split_rows[by_user]
        keys = {k: v[event_rows] for k, v in events.items()}
        return cls(
            keys,
            split_rows,
            {k: v[~test] for k, v in events.items()},
            serving_days(keys["ts"], days),
            tuple(days),
        )

    def days(self) -> Iterator[ServedSplit]:
        """The split one serving day at a time, in order: each day's rows, with every earlier
        day of the split added to what comes before them (the state at that day's start)."""
        for day in np.unique(self.day):
            today, earlier = self.day == day, self.day < day
            before = {k: np.concatenate([v, self.keys[k][earlier]]) for k, v in self.before.items()}
            keys = {k: v[today] for k, v in self.keys.items()}
            yield ServedSplit(keys, self.order[today], before, self.day[today], self.day_names)

    def snapshot(self, layout: Layout, resolution: int = SNAPSHOT_SECONDS) -> Snapshot:
        """What a version registered at the test day's start would serve with (its times at
        ``resolution`` seconds, as a registered snapshot keeps them)."""
        from components.preprocess.counts import CounterState

        state = CounterState()
        b = self.before
        step = 1 << 21  # the counts' totals add up in any order; chunks bound the memory
        for start in range(0, len(b["ts"]), step):
            part = slice(start, start + step)
            state.features(b["item_key"][part], b["cat_key"][part], b["ts"][part], b["label"][part])
        until = None  # the serving day's start: the end of the window before it
        if self.day_names and len(self.day):
            start = dt.date.fromisoformat(self.day_names[int(self.day[0])])
            until = (start.toordinal() - EPOCH_ORDINAL) * SECONDS_PER_DAY
        return Snapshot(state, UserState.of_events(self.before, layout, resolution, until))

    def batches(
        self, snapshot: Snapshot, layout: Layout, size: int, day_events: bool = True
    ) -> Iterator[dict]:
        """The test rows' arrays as serving builds them from ``snapshot``, ``size`` rows at a
        time, with their labels, in this split's ``keys`` order; ``day_events``: each row sends its
        user's events of the test day before it (what a caller sends since the snapshot), else
        none (the snapshot alone)."""
        k = self.keys
        n = len(k["ts"])
        user, ts = k["user_key"], k["ts"]
        # keys are sorted by user, then time: a row's earlier events of the day start at its
        # user's first row and end before its own timestamp's first row
        first_of_user = np.r_[True, user[1:] != user[:-1]] if n else np.ones(0, bool)
        first_of_time = first_of_user | np.r_[True, ts[1:] != ts[:-1]] if n else first_of_user
        index = np.arange(n)
        user_start = np.maximum.accumulate(np.where(first_of_user, index, 0))
        time_start = np.maximum.accumulate(np.where(first_of_time, index, 0))
        for start in range(0, n, size):
            part = slice(start, start + size)
            rows = index[part]
            events = owner = given = None
            if day_events:
                picked, owner = ranges(user_start[rows], time_start[rows])
                events = {c: k[c][picked] for c in USER_EVENT_COLUMNS}
                given = np.ones(len(rows), bool)
            arrays = key_inputs(
                user[part],
                k["item_key"][part],
                k["cat_key"][part],
                ts[part],
                snapshot,
                layout,
                events,
                owner,
                given,
            )
            arrays["label"] = k["label"][part].astype(np.uint8)
            yield arrays


def serving_days(ts: np.ndarray, days: tuple[str, ...]) -> np.ndarray:
    """Each row's serving day, an index into ``days`` (the split's UTC days, ISO dates in order):
    its timestamp's UTC day, clipped into the split, as a row of a day folder may lie a few hours
    outside its day. A split of one day (or none named) is all 0, whatever the timestamps."""
    if len(days) <= 1:
        return np.zeros(len(ts), np.int64)
    first = dt.date.fromisoformat(days[0]).toordinal() - EPOCH_ORDINAL
    utc_day = np.asarray(ts, np.int64) // SECONDS_PER_DAY
    return np.clip(utc_day - first, 0, len(days) - 1)


def _match(
    rows: dict[str, np.ndarray], events: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(row index, event index)`` of equal ``MATCH`` values, each used once: rows that are
    exactly alike pair with alike events in any order (their arrays are alike too)."""
    n = len(rows["label"])
    cols = [
        np.concatenate([np.asarray(rows[c], np.int64), np.asarray(events[c], np.int64)])
        for c in MATCH
    ]
    side = np.r_[np.zeros(n, np.int8), np.ones(len(events["label"]), np.int8)]
    order = np.lexsort((side, *reversed(cols)))
    sorted_cols = [c[order] for c in cols]
    new = np.ones(len(order), bool)
    for c in sorted_cols:
        new[1:] &= c[1:] == c[:-1]
    new = ~new
    new[0] = True
    group = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    rank = np.arange(len(order)) - first[group]
    is_event = side[order] == 1
    rows_in = np.bincount(group, weights=~is_event, minlength=len(first)).astype(np.int64)
    # within a group the split's rows come first, then the events: the k-th event of a group
    # pairs with the group's k-th row
    where = np.flatnonzero(is_event)
    k = rank[where] - rows_in[group[where]]
    taken = k < rows_in[group[where]]
    row_index = order[first[group[where[taken]]] + k[taken]]
    event_index = order[where[taken]] - n
    return row_index, event_index
