import bisect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.preprocess.config import GAP_EDGES_SECONDS
from components.preprocess.sequences import (
    build_histories,
    context_features,
    duplicate_mask,
    sort_order,
)

EDGES = np.asarray(GAP_EDGES_SECONDS, np.int64)


def reference_histories(rows, seq_len):
    """Plain Python: for each row, that user's last seq_len clicks with a smaller timestamp.

    ``rows`` are (user, ts, label, item, cat) in sort order; ties in time keep
    sort order among the clicks.
    """
    out = []
    for user, ts, _label, _item, _cat in rows:
        clicks = [(t, i, c) for (u, t, lab, i, c) in rows if u == user and lab == 1 and t < ts]
        clicks = clicks[-seq_len:]
        pad = seq_len - len(clicks)
        items = [0] * pad + [i for _, i, _ in clicks]
        cats = [0] * pad + [c for _, _, c in clicks]
        gaps = [0] * pad + [
            bisect.bisect_right(GAP_EDGES_SECONDS, ts - t) + 1 for t, _, _ in clicks
        ]
        out.append((items, cats, gaps, len(clicks)))
    return out


events = st.lists(
    st.tuples(
        st.integers(0, 4),  # user
        st.integers(0, 40).map(lambda x: x * 997),  # timestamps with ties and wide gaps
        st.integers(0, 1),  # label
        st.integers(1, 50),  # item bucket
        st.integers(1, 9),  # category bucket
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(events, st.integers(1, 6))
def test_histories_match_plain_python_reference(rows, seq_len):
    columns = (
        [np.asarray(c, np.int64) for c in zip(*rows, strict=True)]
        if rows
        else [np.empty(0, np.int64)] * 5
    )
    user, ts, label, item, cat = columns
    order = sort_order(user, ts, item, cat, label, np.zeros(len(rows), np.int64))
    user, ts, label, item, cat = (c[order] for c in (user, ts, label, item, cat))
    got = build_histories(
        user, ts, label, item.astype(np.int32), cat.astype(np.int32), seq_len, EDGES
    )
    expected = reference_histories(list(zip(user, ts, label, item, cat, strict=True)), seq_len)
    for i, (items, cats, gaps, length) in enumerate(expected):
        assert got["hist_item"][i].tolist() == items
        assert got["hist_cat"][i].tolist() == cats
        assert got["hist_gap"][i].tolist() == gaps
        assert got["hist_len"][i] == length


def test_history_excludes_same_second_clicks_and_other_users():
    # user 1 clicks at t=10 and t=20; an exposure at t=20 sees only the first
    user = np.array([1, 1, 1, 2])
    ts = np.array([10, 20, 20, 30])
    label = np.array([1, 1, 0, 0])
    item = np.array([5, 6, 7, 8], np.int32)
    got = build_histories(user, ts, label, item, item, 3, EDGES)
    assert got["hist_item"].tolist() == [[0, 0, 0], [0, 0, 5], [0, 0, 5], [0, 0, 0]]
    assert got["hist_len"].tolist() == [0, 1, 1, 0]
    assert got["hist_gap"][1, 2] == 1  # 10 seconds: under a minute


def test_history_keeps_only_the_most_recent_clicks_right_aligned():
    n = 6
    user = np.zeros(n, np.int64)
    ts = np.arange(n) * 100
    label = np.ones(n, np.int64)
    item = np.arange(1, n + 1, dtype=np.int32)
    got = build_histories(user, ts, label, item, item, 3, EDGES)
    assert got["hist_item"][-1].tolist() == [3, 4, 5]
    assert got["hist_len"].tolist() == [0, 1, 2, 3, 3, 3]


def test_duplicates_are_neighbours_after_sorting():
    user = np.array([1, 1, 1, 1])
    ts = np.array([5, 5, 5, 5])
    item = np.array([9, 8, 9, 9])
    cat = np.array([1, 1, 1, 2])
    label = np.array([0, 0, 0, 0])
    order = sort_order(user, ts, item, cat, label, np.zeros(4, np.int64))
    dup = duplicate_mask(*(c[order] for c in (user, ts, item, cat, label)))
    assert dup.sum() == 1  # rows 0 and 2 are identical; row 3 differs in category


def test_context_features_hour_and_weekday():
    # 2026-03-02 is a Monday; 13:30 UTC
    ts = np.array([1772458200, 1772458200 + 86_400 * 6])
    assert context_features(ts).tolist() == [[13, 0], [13, 6]]


# ----------------------------------------------------------------------------- exact contracts


def histories(user, ts, label, item, seq_len=3, edges=EDGES):
    item = np.asarray(item, np.int32)
    return build_histories(
        np.asarray(user, np.int64),
        np.asarray(ts, np.int64),
        np.asarray(label),
        item,
        item + 100,
        seq_len,
        np.asarray(edges, np.int64),
    )


def test_output_arrays_have_the_dataset_dtypes_and_shapes():
    got = histories([1, 1], [10, 20], [1, 0], [5, 6])
    assert {k: (v.dtype, v.shape) for k, v in got.items()} == {
        "hist_item": (np.int32, (2, 3)),
        "hist_cat": (np.int32, (2, 3)),
        "hist_gap": (np.uint8, (2, 3)),
        "hist_len": (np.int16, (2,)),
    }
    assert got["hist_cat"].tolist() == [[0, 0, 0], [0, 0, 105]]
    empty = histories([], [], [], [])
    assert {k: (v.dtype, v.shape) for k, v in empty.items()} == {
        "hist_item": (np.int32, (0, 3)),
        "hist_cat": (np.int32, (0, 3)),
        "hist_gap": (np.uint8, (0, 3)),
        "hist_len": (np.int16, (0,)),
    }


def test_gap_buckets_count_a_gap_equal_to_an_edge_in_the_next_bucket():
    # edges 60 and 3600: gap < 60 -> 1, 60 <= gap < 3600 -> 2, gap >= 3600 -> 3 (0 = padding)
    edges = [60, 3600]
    ts = [0, 59, 60, 3599, 3600]
    got = histories([7] * 5, ts, [1, 0, 0, 0, 0], [9] * 5, seq_len=1, edges=edges)
    assert got["hist_gap"][:, 0].tolist() == [0, 1, 2, 2, 3]


def test_at_most_254_gap_edges():
    assert histories([1], [0], [0], [1], edges=list(range(1, 255)))["hist_gap"].tolist() == [
        [0, 0, 0]
    ]
    with pytest.raises(ValueError, match="^at most 254 gap edges fit a uint8 bucket$"):
        histories([1], [0], [0], [1], edges=list(range(1, 256)))


def test_keys_stay_exact_where_floating_point_would_merge_seconds():
    """A click one second before an exposure, with times near 1e16 s: int64 keys keep them apart
    (float64 has a spacing of 4 there and would call the click simultaneous)."""
    base = 10**16
    got = histories([1, 2, 2], [0, base + 1, base + 2], [1, 1, 0], [5, 6, 7])
    assert got["hist_item"].tolist() == [[0, 0, 0], [0, 0, 0], [0, 0, 6]]
    assert got["hist_len"].tolist() == [0, 0, 1]


def test_partition_key_space_limit_is_exact():
    # two users and a time span of exactly 2**61 seconds fill 2**62 keys: refused; one less fits
    t0 = 1_000
    with pytest.raises(
        ValueError, match="^time span x users too large for one partition; use more partitions$"
    ):
        histories([1, 2], [t0, t0 + 2**61 - 1], [1, 0], [5, 6])
    got = histories([1, 2], [t0, t0 + 2**61 - 2], [1, 0], [5, 6])
    assert got["hist_len"].tolist() == [0, 0]
    three = histories(
        [1, 2, 3], [t0, t0 + 2**60, t0 + 2**60], [1, 1, 0], [5, 6, 7]
    )  # 3 x (2**60 + 1) fits
    assert three["hist_len"].tolist() == [0, 0, 0]


def test_context_features_at_hour_and_day_boundaries():
    # epoch day 0 (1970-01-01) was a Thursday: weekday 3 with Monday = 0
    ts = np.array([0, 3599, 3600, 86_399, 86_400, 7 * 86_400 - 1, 7 * 86_400, -1])
    got = context_features(ts)
    assert got.dtype == np.uint8
    assert got.tolist() == [[0, 3], [0, 3], [1, 3], [23, 3], [0, 4], [23, 2], [0, 3], [23, 2]]


def test_duplicate_mask_marks_later_copies_only():
    a = np.array([1, 1, 2, 2, 2])
    b = np.array([5, 5, 5, 5, 6])
    dup = duplicate_mask(a, b)
    assert dup.dtype == np.bool_ and dup.tolist() == [False, True, False, True, False]
    assert duplicate_mask(np.array([3, 3]), np.array([4, 4])).tolist() == [False, True]
    assert duplicate_mask(np.array([3]), np.array([4])).tolist() == [False]
    assert duplicate_mask(np.array([], np.int64)).tolist() == []
