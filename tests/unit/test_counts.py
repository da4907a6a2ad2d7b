"""Causal count features: equal to a brute-force computation, and free of leakage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components.common.dataset import DENSE_FEATURES
from components.preprocess.counts import (
    NEVER_SECONDS,
    CounterState,
    dense_features,
    user_features,
)
from tests.reference import brute_force_features

COLUMNS = ("user_key", "item_key", "cat_key", "ts", "label")


def _events(seed: int, n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "user_key": rng.integers(1, 6, n),
            "item_key": rng.integers(1, 9, n),
            "cat_key": rng.integers(0, 3, n),
            # few distinct timestamps: many rows share one
            "ts": 1_700_000_000 + rng.integers(0, 40, n) * 97,
            "label": rng.integers(0, 2, n),
        }
    )


def _features(df: pd.DataFrame, parts: int = 1) -> np.ndarray:
    """As preprocess computes them: CounterState over ``parts`` time-ordered chunks, then
    user_features over the rows of each user (here: all rows, shuffled)."""
    bounds = np.unique(df.ts.to_numpy())
    state = CounterState()
    global_columns, prior = np.zeros((len(df), 6), np.float32), np.zeros(len(df))
    for cut in np.array_split(bounds, parts):
        rows = np.flatnonzero(np.isin(df.ts.to_numpy(), cut))
        sub = df.iloc[rows]
        global_columns[rows], prior[rows] = state.features(
            sub.item_key.to_numpy(), sub.cat_key.to_numpy(), sub.ts.to_numpy(), sub.label.to_numpy()
        )
    shuffled = np.random.default_rng(0).permutation(len(df))
    users = np.zeros((len(df), len(DENSE_FEATURES) - 6), np.float32)
    users[shuffled] = user_features(*(df[c].to_numpy()[shuffled] for c in COLUMNS), prior[shuffled])
    return dense_features(global_columns, users)


@pytest.mark.parametrize("parts", [1, 4, 13])
def test_counts_equal_brute_force_whatever_the_partitioning(parts):
    df = _events(seed=parts)
    np.testing.assert_allclose(_features(df, parts), brute_force_features(df), rtol=1e-5, atol=1e-5)


def test_rows_sharing_a_timestamp_do_not_see_each_other():
    df = pd.DataFrame(
        {
            "user_key": [1, 1, 1],
            "item_key": [5, 5, 5],
            "cat_key": [2, 2, 2],
            "ts": [100, 100, 200],
            "label": [1, 1, 0],
        }
    )
    f = _features(df)
    imps = DENSE_FEATURES.index("item_log_impressions")
    clicks = DENSE_FEATURES.index("item_log_clicks")
    assert list(np.expm1(f[:, imps]).round()) == [0, 0, 2]
    assert list(np.expm1(f[:, clicks]).round()) == [0, 0, 2]
    since = DENSE_FEATURES.index("user_log_seconds_since_click")
    assert np.expm1(f[2, since]).round() == 100
    assert np.expm1(f[0, since]).round() == NEVER_SECONDS


def test_a_row_never_sees_its_own_label_or_later_rows():
    df = _events(seed=7)
    base = _features(df)
    i = int(np.argsort(df.ts.to_numpy())[len(df) // 2])
    t = df.ts[i]
    changed = df.copy()
    changed.loc[i, "label"] = 1 - changed.loc[i, "label"]
    later = changed.ts > t
    changed.loc[later, "label"] = 1 - changed.loc[later, "label"]  # every later label flipped
    changed.loc[later, "item_key"] = 99
    after = _features(changed)
    not_later = (df.ts <= t).to_numpy()
    np.testing.assert_array_equal(after[not_later], base[not_later])
    # ...and a row does see an earlier change
    j = int(np.flatnonzero((df.ts < t).to_numpy() & (df.item_key == df.item_key[i]).to_numpy())[0])
    earlier = df.copy()
    earlier.loc[j, "label"] = 1 - earlier.loc[j, "label"]
    col = DENSE_FEATURES.index("item_log_clicks")
    assert _features(earlier)[i, col] != base[i, col]


def test_state_dict_round_trip_continues_identically():
    df = _events(seed=3)
    ts = df.ts.to_numpy()
    first, second = df[ts < np.median(ts)], df[ts >= np.median(ts)]
    names = ("item_key", "cat_key", "ts", "label")
    a = CounterState()
    a.features(*(first[c].to_numpy() for c in names))
    b = CounterState()
    b.load_state_dict({k: np.copy(v) for k, v in a.state_dict().items()})
    args = [second[c].to_numpy() for c in names]
    for x, y in zip(a.features(*args), b.features(*args), strict=True):
        np.testing.assert_array_equal(x, y)


def test_empty_batch():
    empty = np.empty(0, np.int64)
    columns, prior = CounterState().features(empty, empty, empty, empty)
    users = user_features(empty, empty, empty, empty, empty, np.empty(0))
    assert dense_features(columns, users).shape == (0, len(DENSE_FEATURES))
    assert prior.shape == (0,)


def test_dense_statistics_read_in_chunks_equal_numpy(tmp_path):
    from components.preprocess.stage import dense_stats

    values = np.random.default_rng(1).standard_normal((1001, 4)).astype(np.float32) * [1, 2, 3, 4]
    np.save(tmp_path / "dense.npy", values)
    stats = dense_stats(tmp_path / "dense.npy", chunk=97)  # chunks that do not divide the rows
    np.testing.assert_allclose(stats["mean"], values.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(stats["std"], values.std(axis=0), atol=1e-5)
