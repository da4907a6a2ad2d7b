"""Model inputs of cleaned events: the one implementation preprocess and the scorers share.

Preprocess calls :func:`model_inputs` on each partition of users; the
registered model (:mod:`components.score.features`) calls it on each request's
events, so a score is computed from exactly the arrays a training row would
hold. Free of Dask: a serving process imports numpy only.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from components.common.hashing import bucketize
from components.preprocess.config import GAP_EDGES_SECONDS
from components.preprocess.counts import dense_features, user_features
from components.preprocess.sequences import build_histories, context_features


class Layout(Protocol):
    """Bucket counts and sequence lengths (a PreprocessConfig, or :class:`components.score.features.Layout`)."""

    item_buckets: int
    category_buckets: int
    user_buckets: int
    seq_len: int
    neg_len: int


def model_inputs(
    cols: dict[str, np.ndarray],
    global_columns: np.ndarray,
    prior: np.ndarray,
    layout: Layout,
    group: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Every per-row array of the Dataset contract (``array_specs``) for rows in ``sort_order``.

    ``cols``: the cleaned columns (``user_key``, ``item_key``, ``cat_key``, ``ts``, ``label``);
    ``global_columns``/``prior``: the item and category count columns and the prior of each
    row (:class:`CounterState`). Histories and user-level counts are per ``group`` (default:
    the user): rows of a group see the group's earlier rows, nothing else.
    """
    group = cols["user_key"] if group is None else group
    dense = dense_features(
        global_columns,
        user_features(group, cols["item_key"], cols["cat_key"], cols["ts"], cols["label"], prior),
    )
    item = bucketize(cols["item_key"], layout.item_buckets)
    cat = bucketize(cols["cat_key"], layout.category_buckets, null=cols["cat_key"] == 0)
    edges = np.asarray(GAP_EDGES_SECONDS, np.int64)
    hist = build_histories(group, cols["ts"], cols["label"] == 1, item, cat, layout.seq_len, edges)
    skipped = build_histories(
        group, cols["ts"], cols["label"] == 0, item, cat, layout.neg_len, edges, prefix="neg"
    )
    return {
        **hist,
        **skipped,
        "dense": dense,
        "target_item": item,
        "target_cat": cat,
        "user": bucketize(cols["user_key"], layout.user_buckets),
        "user_key": cols["user_key"],
        "context": context_features(cols["ts"]),
        "ts": cols["ts"],
        "label": cols["label"].astype(np.uint8),
    }
