"""The Dataset contract between preprocess (writer) and train/evaluate (readers).

Kept here, free of Dask, so a training process does not import the
preprocessing stack to learn the array layout.
"""

from __future__ import annotations

SCHEMA_VERSION = 2
"""2: dense count features (``dense``) and the recent skipped exposures (``neg_*``)."""
SPLITS = ("train", "val", "test")

GLOBAL_ENTITIES = ("item", "category")
"""Entities counted across all users (in time order, with state carried between partitions)."""
USER_ENTITIES = ("user", "user_category", "user_item")
"""Entities within one user's rows: the user, the user in one category, the user with one item."""
COUNT_ENTITIES = (*GLOBAL_ENTITIES, *USER_ENTITIES)
COUNT_STATS = ("log_impressions", "log_clicks", "click_logit")
RECENCY_EVENTS = ("exposure", "click")
DENSE_FEATURES: tuple[str, ...] = (
    *(f"{entity}_{stat}" for entity in COUNT_ENTITIES for stat in COUNT_STATS),
    *(f"{entity}_log_seconds_since_{event}" for entity in USER_ENTITIES for event in RECENCY_EVENTS),
)
"""Columns of the ``dense`` array, in order (how each is computed: components/preprocess/counts.py)."""


def array_specs(seq_len: int, neg_len: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name -> (dtype, per-row shape) of every per-split array (the Dataset contract)."""
    return {
        "hist_item": ("int32", (seq_len,)),
        "hist_cat": ("int32", (seq_len,)),
        "hist_gap": ("uint8", (seq_len,)),
        "hist_len": ("int16", ()),
        "neg_item": ("int32", (neg_len,)),
        "neg_cat": ("int32", (neg_len,)),
        "neg_gap": ("uint8", (neg_len,)),
        "neg_len": ("int16", ()),
        "dense": ("float32", (len(DENSE_FEATURES),)),
        "target_item": ("int32", ()),
        "target_cat": ("int32", ()),
        "user": ("int32", ()),
        "user_key": ("int64", ()),
        "context": ("uint8", (2,)),
        "ts": ("int64", ()),
        "label": ("uint8", ()),
    }
