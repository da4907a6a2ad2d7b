"""Causal count features: for every row, what was known strictly before its timestamp.

Per entity (``COUNT_ENTITIES``: item, category, user, user x category, user x
item) the impressions and clicks of every earlier row -- all splits, the
look-back days included -- and the smoothed click rate; per user, user x
category and user x item, the seconds since the last exposure and the last
click. "Earlier" is by timestamp: rows that share a timestamp never see each
other, so a row's features depend neither on its own label nor on anything at
or after its time.

Transforms (the columns of ``DENSE_FEATURES``, float32):

* ``<entity>_log_impressions`` / ``<entity>_log_clicks``: ``log1p(count)``;
* ``<entity>_click_logit``: log-odds of ``(clicks + PRIOR_WEIGHT * prior) /
  (impressions + PRIOR_WEIGHT)``, where ``prior`` is the click rate of all
  earlier rows of all users (Laplace-smoothed): an entity seen a few times sits
  near the global rate, one seen often at its own;
* ``<entity>_log_seconds_since_{exposure,click}``: ``log1p(seconds)``, capped at
  ``NEVER_SECONDS`` (also the value when there was none).

Two scopes, each at bounded memory:

* item and category (``GLOBAL_ENTITIES``) are counted the way a serving feature
  store would: rows in time order, partition after partition, with a
  :class:`CounterState` carried from one to the next (preprocess sorts the rows
  into time-ordered partitions with Dask first); it also gives each row its
  ``prior``. State: one entry per item and category;
* user-level entities (``USER_ENTITIES``) by :func:`user_features` inside the
  shuffle-by-user partitions, which hold every row of their users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.common.dataset import DENSE_FEATURES, GLOBAL_ENTITIES, USER_ENTITIES

PRIOR_WEIGHT = 20.0
"""Pseudo-impressions at the prior click rate added to every entity's counts."""
NEVER_SECONDS = 30 * 86_400
GLOBAL_COLUMNS = DENSE_FEATURES[: 3 * len(GLOBAL_ENTITIES)]
"""The dense columns :class:`CounterState` computes (the rest come from :func:`user_features`)."""
"""Cap of the time-since features, and their value when nothing happened before."""
NEVER_TS = np.iinfo(np.int64).min
"""The timestamp of "never" (no earlier exposure or click)."""
# An odd 64-bit constant: user_key * MIX + other spreads (user, item/category) pairs over int64.
_MIX = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15 as int64


def pair_key(user_key: np.ndarray, other_key: np.ndarray) -> np.ndarray:
    """One int64 key per (user, item) or (user, category) pair (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        return user_key.astype(np.int64) * _MIX + other_key.astype(np.int64)


@dataclass
class Table:
    """Sorted unique int64 keys with one int64 column per value name."""

    keys: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    values: dict[str, np.ndarray] = field(default_factory=dict)

    def lookup(self, keys: np.ndarray, name: str, missing: int) -> np.ndarray:
        column = self.values.get(name)
        if column is None or not len(self.keys):
            return np.full(len(keys), missing, np.int64)
        idx = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[idx] == keys, column[idx], missing)

    def merge(self, keys: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Add the counts of new (unique) keys."""
        merged, inverse = np.unique(np.concatenate([self.keys, keys]), return_inverse=True)
        self.values = {
            name: np.bincount(
                inverse,
                minlength=len(merged),
                weights=np.concatenate(
                    [self.values.get(name, np.zeros(len(self.keys), np.int64)), new]
                ),
            ).astype(np.int64)
            for name, new in values.items()
        }
        self.keys = merged


@dataclass
class CounterState:
    """Everything known across users at a point in time: item and category counts, global totals.

    ``state_dict()`` / ``load_state_dict()`` round-trip it as plain numpy arrays.
    """

    counts: dict[str, Table] = field(default_factory=lambda: {e: Table() for e in GLOBAL_ENTITIES})
    impressions: int = 0
    clicks: int = 0

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {"impressions": np.int64(self.impressions), "clicks": np.int64(self.clicks)}
        for name, table in self.counts.items():
            out[f"{name}.keys"] = table.keys
            out.update({f"{name}.{col}": values for col, values in table.values.items()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.impressions, self.clicks = int(state["impressions"]), int(state["clicks"])
        for name in GLOBAL_ENTITIES:
            self.counts[name] = Table(
                np.asarray(state[f"{name}.keys"], np.int64),
                {
                    key.split(".", 1)[1]: np.asarray(value, np.int64)
                    for key, value in state.items()
                    if key.startswith(f"{name}.") and key != f"{name}.keys"
                },
            )

    def features(
        self,
        item_key: np.ndarray,
        cat_key: np.ndarray,
        ts: np.ndarray,
        label: np.ndarray,
        fold: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For rows later than every row already folded in: the ``GLOBAL_ENTITIES`` columns
        ``[n, 3 * len(GLOBAL_ENTITIES)]`` and each row's prior; then folds these rows in
        (unless ``fold`` is false: a scorer's read-only look-up). Rows need not be sorted; equal
        timestamps never see each other."""
        n = len(ts)
        label = label.astype(np.int64)
        if n == 0:
            return np.empty((0, 3 * len(GLOBAL_ENTITIES)), np.float32), np.empty(0)
        g_imps, g_clicks, _ = _earlier(np.zeros(n, np.int64), ts, label)
        prior = (self.clicks + g_clicks + 1.0) / (self.impressions + g_imps + 2.0)
        columns = []
        for entity, keys in (("item", item_key), ("category", cat_key)):
            table = self.counts[entity]
            imps, clicks, totals = _earlier(keys, ts, label)
            imps = imps + table.lookup(keys, "impressions", 0)
            clicks = clicks + table.lookup(keys, "clicks", 0)
            columns += count_columns(imps, clicks, prior)
            if fold:
                table.merge(*totals)
        if fold:
            self.impressions += n
            self.clicks += int(label.sum())
        return np.stack(columns, axis=1).astype(np.float32), prior


def user_features(
    user_key: np.ndarray,
    item_key: np.ndarray,
    cat_key: np.ndarray,
    ts: np.ndarray,
    label: np.ndarray,
    prior: np.ndarray,
) -> np.ndarray:
    """The ``USER_ENTITIES`` count columns, then their recency columns, for rows that include
    every earlier row of their users (any order)."""
    label = label.astype(np.int64)
    keys = {
        "user": user_key,
        "user_category": pair_key(user_key, cat_key),
        "user_item": pair_key(user_key, item_key),
    }
    counts, recency = [], []
    for entity in USER_ENTITIES:
        imps, clicks, _ = _earlier(keys[entity], ts, label)
        counts += count_columns(imps, clicks, prior)
        exposure, click = _latest(keys[entity], ts, label)
        recency += [log_seconds(ts, exposure), log_seconds(ts, click)]
    return (
        np.stack(counts + recency, axis=1).astype(np.float32)
        if len(ts)
        else np.empty((0, 5 * len(USER_ENTITIES)), np.float32)
    )


def dense_features(global_columns: np.ndarray, user_columns: np.ndarray) -> np.ndarray:
    """The ``dense`` array: global count columns, then the user-level ones (``DENSE_FEATURES``)."""
    out = np.concatenate([global_columns, user_columns], axis=1).astype(np.float32)
    if out.shape[1] != len(DENSE_FEATURES):
        raise ValueError(f"{out.shape[1]} dense columns, the contract has {len(DENSE_FEATURES)}")
    return out


def count_columns(imps: np.ndarray, clicks: np.ndarray, prior: np.ndarray) -> list[np.ndarray]:
    """An entity's three count columns (``COUNT_STATS``) from its earlier impressions and clicks."""
    rate = (clicks + PRIOR_WEIGHT * prior) / (imps + PRIOR_WEIGHT)
    return [np.log1p(imps), np.log1p(clicks), np.log(rate) - np.log1p(-rate)]


def log_seconds(ts: np.ndarray, before: np.ndarray) -> np.ndarray:
    """A recency column: log1p of the seconds since ``before`` (``NEVER_TS``: never), capped."""
    seconds = np.where(
        before != NEVER_TS, ts - np.maximum(before, ts - NEVER_SECONDS), NEVER_SECONDS
    )
    return np.log1p(seconds.astype(np.float64))


def _groups(key: np.ndarray, ts: np.ndarray):
    """Rows sorted by (key, ts): the order, and for each sorted row its group's and its
    timestamp block's first index."""
    order = np.lexsort((ts, key))
    k, t = key[order], ts[order]
    n = len(k)
    index = np.arange(n)
    new_group = np.ones(n, bool)
    new_group[1:] = k[1:] != k[:-1]
    new_block = new_group.copy()
    new_block[1:] |= t[1:] != t[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, index, 0))
    block_start = np.maximum.accumulate(np.where(new_block, index, 0))
    return order, new_group, group_start, block_start


def _earlier(key: np.ndarray, ts: np.ndarray, label: np.ndarray):
    """Per row: impressions and clicks of rows with the same key and a smaller timestamp;
    and per distinct key its (impressions, clicks) totals."""
    n = len(key)
    order, new_group, group_start, block_start = _groups(key, ts)
    clicks_sorted = np.zeros(n + 1, np.int64)
    np.cumsum(label[order], out=clicks_sorted[1:])
    imps, clicks = np.empty(n, np.int64), np.empty(n, np.int64)
    imps[order] = block_start - group_start
    clicks[order] = clicks_sorted[block_start] - clicks_sorted[group_start]
    starts = np.flatnonzero(new_group)
    ends = np.append(starts[1:], n)
    totals = {
        "impressions": (ends - starts).astype(np.int64),
        "clicks": clicks_sorted[ends] - clicks_sorted[starts],
    }
    return imps, clicks, (key[order][starts], totals)


def _latest(key: np.ndarray, ts: np.ndarray, label: np.ndarray):
    """Per row: the latest exposure and click timestamps of its key strictly before it within
    these rows (``NEVER_TS`` if none)."""
    n = len(key)
    order, new_group, group_start, block_start = _groups(key, ts)
    t, y = ts[order], label[order]
    index = np.arange(n)
    prev = block_start - 1  # last row of an earlier timestamp (valid if in the same group)
    has_prev = prev >= group_start
    exposure = np.where(has_prev, t[np.maximum(prev, 0)], NEVER_TS)
    last_click_row = np.maximum.accumulate(np.where(y == 1, index, -1))
    click_row = np.where(has_prev, last_click_row[np.maximum(prev, 0)], -1)
    click = np.where(click_row >= group_start, t[np.maximum(click_row, 0)], NEVER_TS)
    out_exposure, out_click = np.empty(n, np.int64), np.empty(n, np.int64)
    out_exposure[order], out_click[order] = exposure, click
    return out_exposure, out_click
