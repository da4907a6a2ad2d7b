"""The quality benchmark's practitioner features: sequence-derived columns computed as documented."""

from __future__ import annotations

import numpy as np

from benchmarks.quality import tabular
from components.common.dataset import DENSE_FEATURES


def test_sequence_derived_columns_count_matches_and_ignore_padding():
    arrays = {
        "hist_item": np.array([[0, 5, 7, 5], [0, 0, 0, 0]]),
        "hist_cat": np.array([[0, 2, 2, 3], [0, 0, 0, 0]]),
        "hist_gap": np.array([[0, 4, 3, 2], [0, 0, 0, 0]]),
        "hist_len": np.array([3, 0]),
        "neg_item": np.array([[5, 9], [0, 4]]),
        "neg_cat": np.array([[3, 3], [0, 2]]),
        "target_item": np.array([5, 0]),
        "target_cat": np.array([2, 0]),
        "context": np.array([[21, 6], [3, 0]]),
        "dense": np.arange(2 * len(DENSE_FEATURES), dtype=np.float32).reshape(2, -1),
    }
    matrix, names = tabular(arrays)
    assert names[: len(DENSE_FEATURES)] == list(DENSE_FEATURES)
    np.testing.assert_array_equal(matrix[:, : len(DENSE_FEATURES)], arrays["dense"])
    row = dict(zip(names, matrix[0], strict=True))
    assert row["target_in_history"] == 2 and row["category_matches_in_history"] == 2
    assert row["last_click_gap_bucket"] == 2 and row["history_length"] == 3
    assert row["target_in_skipped"] == 1 and row["category_matches_in_skipped"] == 0
    assert (row["hour"], row["weekday"]) == (21, 6)
    empty = dict(zip(names, matrix[1], strict=True))  # id 0 is padding: never a match
    assert empty["target_in_history"] == 0 and empty["target_in_skipped"] == 0
    assert empty["category_matches_in_history"] == 0
